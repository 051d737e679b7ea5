#include "models/llama/llama_weights.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <vector>

#include "framework/core/error.h"
#include "models/llama/gemv.h"
#include "models/llama/qgemm.h"
#include "models/llama/qgemm_x8.h"
#include "models/loaders/dequant.h"

namespace speclab {

Activations parse_activations(const std::string& text, const std::string& what) {
  if (text == "f32") return Activations::kF32;
  if (text == "int8" || text == "auto") return Activations::kInt8;
  throw Error(ErrorKind::kConfig, "expected f32, int8 or auto, found '" + text + "'", "", what);
}

const char* activations_name(Activations a) { return a == Activations::kInt8 ? "int8" : "f32"; }

namespace {

// Moves a HostTensor into an at::Tensor without copying (the vector is owned by the deleter).
at::Tensor to_tensor(HostTensor&& t) {
  auto owner = new std::vector<float>(std::move(t.data));
  return at::from_blob(
      owner->data(), t.shape, [owner](void*) { delete owner; }, at::TensorOptions().dtype(at::kFloat));
}

HostTensor take_host(WeightMap& w, const std::string& name) {
  auto it = w.find(name);
  SPECLAB_CHECK(it != w.end(), "validated weight missing: " + name);
  HostTensor t = std::move(it->second);
  w.erase(it);
  return t;
}

// The storage kind of a matrix without parts: "float32" or the ggml type.
std::string kind_of(const WeightMatrix& m) {
  if (m.is_packed()) return ggml_type_name(m.type);
  switch (m.f32.scalar_type()) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "float32";
  }
}

// One matrix without parts: y [n, m.out].
void linear_block(const WeightMatrix& m, const float* x, const float* bias, float* y, int64_t n, Activations act) {
  if (m.is_packed()) {
    if (act == Activations::kInt8 && m.x8.defined() && x8_active())
      gemm_x8_int8(m.x8.data_ptr<uint8_t>(), m.type, x, bias, y, n, m.out, m.in);
    else if (act == Activations::kInt8 && int8_gemm_supports(m.type))
      gemm_packed_int8(m.packed.data_ptr<uint8_t>(), m.type, x, bias, y, n, m.out, m.in);
    else
      gemm_small_packed(m.packed.data_ptr<uint8_t>(), m.type, x, bias, y, n, m.out, m.in);
  } else {
    gemm_small_f32(m.f32.data_ptr<float>(), x, bias, y, n, m.out, m.in);
  }
}

}  // namespace

uint64_t WeightMatrix::bytes() const {
  uint64_t total = 0;
  for (const WeightMatrix& p : parts) total += p.bytes();
  const at::Tensor& t = is_packed() ? packed : f32;
  return total + (t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0);
}

void WeightMatrix::count_kinds(std::vector<std::string>& kinds) const {
  if (parts.empty()) {
    kinds.push_back(kind_of(*this));
    return;
  }
  for (const WeightMatrix& p : parts) p.count_kinds(kinds);
}

WeightMatrix take_matrix(WeightMap& w, const std::string& name) {
  HostTensor t = take_host(w, name);
  SPECLAB_CHECK(t.shape.size() == 2, "weight matrix must be 2-D: " + name);
  WeightMatrix m;
  m.out = t.shape[0];
  m.in = t.shape[1];
  if (t.is_packed()) {
    m.type = t.storage_type;
    auto owner = new std::vector<uint8_t>(std::move(t.packed));
    m.packed = at::from_blob(
        owner->data(), {m.out, static_cast<int64_t>(owner->size()) / m.out}, [owner](void*) { delete owner; },
        at::TensorOptions().dtype(at::kByte));
  } else {
    m.f32 = to_tensor(std::move(t));
  }
  return m;
}

at::Tensor take_vector(WeightMap& w, const std::string& name) {
  HostTensor t = take_host(w, name);
  unpack_to_f32(t, name);
  return to_tensor(std::move(t));
}

WeightMatrix stack(std::vector<WeightMatrix> parts) {
  SPECLAB_CHECK(!parts.empty(), "stack of no matrices");
  if (parts.size() == 1) return std::move(parts[0]);
  WeightMatrix s;
  s.in = parts[0].in;
  for (const WeightMatrix& m : parts) {
    SPECLAB_CHECK(m.in == s.in && m.parts.empty(), "stacked matrices must share their input width");
    s.out += m.out;
  }
  const bool all_packed_same = std::all_of(parts.begin(), parts.end(), [&](const WeightMatrix& m) {
    return m.is_packed() && m.type == parts[0].type;
  });
  const bool all_f32 = std::none_of(parts.begin(), parts.end(), [](const WeightMatrix& m) { return m.is_packed(); });
  std::vector<at::Tensor> ts;
  if (all_packed_same) {
    for (const WeightMatrix& m : parts) ts.push_back(m.packed);
    s.packed = at::cat(ts, 0);
    s.type = parts[0].type;
  } else if (all_f32) {
    for (const WeightMatrix& m : parts) ts.push_back(m.f32);
    s.f32 = at::cat(ts, 0);
  } else {
    s.parts = std::move(parts);  // mixed storage stays as it is on disk
  }
  return s;
}

namespace {
bool quantized_somewhere(const WeightMatrix& m) {
  if (m.is_packed() && int8_gemm_supports(m.type)) return true;
  for (const WeightMatrix& p : m.parts)
    if (quantized_somewhere(p)) return true;
  return false;
}
}  // namespace

bool any_layer_quantized(const LlamaWeights& w) {
  for (const LlamaLayer& L : w.layers)
    for (const WeightMatrix* m : {&L.w_qkv, &L.w_o, &L.w_gate_up, &L.w_down})
      if (quantized_somewhere(*m)) return true;
  return false;
}

void add_x8_repack(WeightMatrix& w) {
  for (WeightMatrix& p : w.parts) add_x8_repack(p);
  if (!w.is_packed() || !int8_gemm_supports(w.type) || !x8_cpu_supported()) return;
  w.x8 = at::empty({x8_bytes(w.type, w.out, w.in)}, at::TensorOptions().dtype(at::kByte));
  repack_x8(w.packed.data_ptr<uint8_t>(), w.type, w.out, w.in, w.x8.data_ptr<uint8_t>());
}

WeightMatrix select_rows(const WeightMatrix& w, const at::Tensor& rows) {
  SPECLAB_CHECK(w.parts.empty(), "select_rows needs a single-block matrix");
  WeightMatrix r = w;
  r.out = rows.size(0);
  r.x8 = at::Tensor();  // add_x8_repack again for the selected rows
  if (w.is_packed())
    r.packed = w.packed.index_select(0, rows).contiguous();
  else
    r.f32 = w.f32.index_select(0, rows).contiguous();
  return r;
}

WeightMatrix pack_f32_matrix(const at::Tensor& w, Activations act) {
  SPECLAB_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_f32_matrix: w must be [out, in] float32");
  const at::Tensor c = w.contiguous();
  WeightMatrix m;
  m.out = c.size(0);
  m.in = c.size(1);
  if (act != Activations::kInt8 || m.in % 32 != 0) {
    m.f32 = c.clone();
    return m;
  }
  const int64_t row_bytes = m.in / 32 * 34;  // Q8_0: f16 scale + 32 int8 per block
  m.type = static_cast<uint32_t>(GgmlType::Q8_0);
  m.packed = at::empty({m.out, row_bytes}, at::kByte);
  const float* src = c.data_ptr<float>();
  for (int64_t r = 0; r < m.out; ++r) {
    const std::vector<uint8_t> q = quantize(GgmlType::Q8_0, src + r * m.in, static_cast<size_t>(m.in), "pack_f32_matrix");
    std::copy(q.begin(), q.end(), m.packed.data_ptr<uint8_t>() + r * row_bytes);
  }
  add_x8_repack(m);
  return m;
}

void linear(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t n, Activations act) {
  if (w.parts.empty()) return linear_block(w, x, bias, y, n, act);
  // Each part into a scratch [n, part.out], then into its columns of y [n, w.out]. With int8
  // activations x is quantized once per block size (32 or 256) and shared by the parts that take
  // it (the same values quantize_activations gives each part alone).
  thread_local std::vector<float> scratch;
  thread_local QuantizedRows xq32, xq256;
  bool have32 = false, have256 = false;
  int64_t offset = 0;
  for (const WeightMatrix& p : w.parts) {
    scratch.resize(static_cast<size_t>(n * p.out));
    const float* b = bias ? bias + offset : nullptr;
    if (act == Activations::kInt8 && p.is_packed() && int8_gemm_supports(p.type)) {
      const bool k256 = ggml_type_traits(p.type)->block_size == 256;  // Q8_K-style 256-blocks (the K-quants, IQ4_XS)
      QuantizedRows& xq = k256 ? xq256 : xq32;
      bool& have = k256 ? have256 : have32;
      if (!have) quantize_activations(p.type, x, n, w.in, xq);
      have = true;
      if (p.x8.defined() && x8_active())
        gemm_x8_int8_q(p.x8.data_ptr<uint8_t>(), p.type, xq, b, scratch.data(), p.out);
      else
        gemm_packed_int8_q(p.packed.data_ptr<uint8_t>(), p.type, xq, b, scratch.data(), p.out);
    } else {
      linear_block(p, x, b, scratch.data(), n, act);
    }
    for (int64_t i = 0; i < n; ++i)
      std::copy(scratch.data() + i * p.out, scratch.data() + (i + 1) * p.out, y + i * w.out + offset);
    offset += p.out;
  }
}

}  // namespace speclab
