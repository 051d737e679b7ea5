#include "models/llama/placement.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <dlfcn.h>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "models/loaders/dequant.h"

namespace speclab {

namespace {

// libtorch registers its CUDA backend from libtorch_cuda.so's static initializers. A linker that
// drops unreferenced libraries (--as-needed, Ubuntu's default) leaves it out of the process even
// in a CUDA build; loading it by name brings it back.
bool cuda_hooks_available() {
  if (at::detail::getCUDAHooks().hasCUDA()) return true;
  if (dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) return false;
  return at::detail::getCUDAHooks().hasCUDA();
}

at::Tensor place(const at::Tensor& t, const ResolvedPlacement& p, at::ScalarType dtype) {
  return t.defined() ? t.to(p.device, dtype).contiguous() : t;
}

void place_matrix(WeightMatrix& m, const ResolvedPlacement& p) {
  m.f32 = dense_f32(m).to(p.device, p.dtype).contiguous();
  m.packed = at::Tensor();
  m.x8 = at::Tensor();
  m.parts.clear();
  m.type = 0;
}

// Whether this libtorch multiplies float16 matrices on the CPU (libtorch 1.13 has no Half kernel
// for addmm there and throws; later 2.x releases have one). Probed once with a 1 x 1 product, so
// the answer is this build's, whatever its version.
bool cpu_half_matmul_available() {
  static const bool ok = [] {
    try {
      const at::Tensor a = at::ones({1, 1}, at::TensorOptions().dtype(at::kHalf));
      (void)at::mm(a, a);
      return true;
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

bool cuda_device_available() {
  return cuda_hooks_available() && at::detail::getCUDAHooks().getNumGPUs() > 0;
}

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kChar: return "int8";
    default: return "float32";
  }
}

ResolvedPlacement resolve_placement(const Placement& in) {
  ResolvedPlacement r;
  if (in.device == "cpu") {
    r.device = at::kCPU;
    r.dense = in.dtype != "auto";
    r.dtype = in.dtype == "auto" ? at::kFloat : dtype_from_name(in.dtype);
    if (r.dtype == at::kHalf && !cpu_half_matmul_available())
      throw Error(ErrorKind::kConfig,
                  "expected bfloat16 or float32 on the CPU, found float16: this libtorch has no float16 matrix "
                  "product on the CPU (recent libtorch 2.x releases have)",
                  "model", "dtype");
  } else {
    if (in.device != "cuda" && in.device.compare(0, 5, "cuda:") != 0)
      throw Error(ErrorKind::kConfig, "expected cpu, cuda or cuda:N, found '" + in.device + "'", "model", "device");
    if (!cuda_hooks_available())
      throw Error(ErrorKind::kConfig,
                  "device '" + in.device + "' asked for, but this libtorch has no CUDA (a CPU build, or libtorch_cuda.so "
                  "does not load): build against a CUDA libtorch (docs/gpu.md) or use device cpu",
                  "model", "device");
    const int64_t count = static_cast<int64_t>(at::detail::getCUDAHooks().getNumGPUs());
    const int64_t index = in.device == "cuda" ? 0 : std::stoll(in.device.substr(5));
    if (index >= count)
      throw Error(ErrorKind::kConfig,
                  "device '" + in.device + "' asked for, but this machine has " + std::to_string(count) +
                      " CUDA device(s)",
                  "model", "device");
    r.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    r.dense = true;
    r.dtype = in.dtype == "auto" ? at::kBFloat16 : dtype_from_name(in.dtype);
  }
  r.device_name = r.device.is_cpu() ? "cpu" : "cuda:" + std::to_string(r.device.index());
  r.dtype_name = dtype_name(r.dtype);
  r.kv_dtype = in.kv_dtype == "auto" ? r.dtype : kv_dtype_from_name(in.kv_dtype);
  r.kv_dtype_name = dtype_name(r.kv_dtype);
  if (!r.device.is_cpu() && r.kv_dtype != r.dtype)
    throw Error(ErrorKind::kConfig,
                std::string("a K/V cache in ") + r.kv_dtype_name + " on CUDA, but the model computes in " +
                    r.dtype_name + ": on CUDA the cache holds the model's dtype (use kv_dtype auto)",
                "model", "kv_dtype");
  return r;
}

at::Tensor dense_f32(const WeightMatrix& w) {
  if (!w.parts.empty()) {
    std::vector<at::Tensor> rows;
    for (const WeightMatrix& part : w.parts) rows.push_back(dense_f32(part));
    return at::cat(rows, 0);
  }
  if (!w.is_packed()) return w.f32.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor out = at::empty({w.out, w.in}, at::kFloat);
  const at::Tensor packed = w.packed.contiguous();
  dequantize(w.type, packed.data_ptr<uint8_t>(), static_cast<size_t>(packed.numel()), out.data_ptr<float>(),
             static_cast<size_t>(w.out * w.in), "weight matrix");
  return out;
}

void place_weights(LlamaWeights& w, const ResolvedPlacement& p, bool tied) {
  place_matrix(w.embed, p);
  if (tied)
    w.lm_head = w.embed;
  else
    place_matrix(w.lm_head, p);
  w.final_norm = place(w.final_norm, p, p.dtype);
  for (LlamaLayer& L : w.layers) {
    L.attn_norm = place(L.attn_norm, p, p.dtype);
    L.mlp_norm = place(L.mlp_norm, p, p.dtype);
    L.b_qkv = place(L.b_qkv, p, p.dtype);
    for (WeightMatrix* m : {&L.w_qkv, &L.w_o, &L.w_gate_up, &L.w_down}) place_matrix(*m, p);
  }
  w.rope_cos = place(w.rope_cos, p, at::kFloat);
  w.rope_sin = place(w.rope_sin, p, at::kFloat);
}

LlamaWeights random_weights(const ModelConfig& c, const ResolvedPlacement& p, uint64_t seed) {
  at::manual_seed(seed);
  const at::TensorOptions o = at::TensorOptions().device(p.device).dtype(p.dtype);
  auto matrix = [&](int64_t out, int64_t in) {
    WeightMatrix m;
    m.out = out;
    m.in = in;
    m.f32 = at::randn({out, in}, o).mul_(0.02);
    return m;
  };
  const int64_t q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  LlamaWeights w;
  w.embed = matrix(c.vocab_size, c.hidden_size);
  w.lm_head = c.tie_word_embeddings ? w.embed : matrix(c.vocab_size, c.hidden_size);
  w.final_norm = at::ones({c.hidden_size}, o);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LlamaLayer L;
    L.attn_norm = at::ones({c.hidden_size}, o);
    L.mlp_norm = at::ones({c.hidden_size}, o);
    L.w_qkv = matrix(q_dim + 2 * kv_dim, c.hidden_size);
    if (c.attention_bias) L.b_qkv = at::zeros({q_dim + 2 * kv_dim}, o);
    L.w_o = matrix(c.hidden_size, q_dim);
    L.w_gate_up = matrix(2 * c.intermediate_size, c.hidden_size);
    L.w_down = matrix(c.hidden_size, c.intermediate_size);
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace speclab
