#include "models/loaders/export.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "framework/core/error.h"
#include "models/loaders/gguf.h"

namespace speclab {

std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& option) {
  std::vector<int64_t> out;
  auto bad = [&](const std::string& why) {
    throw Error(ErrorKind::kConfig, "expected a layer list like 0-5 or 0,2,4; " + why + " in '" + text + "'",
                "command line", option);
  };
  size_t i = 0;
  auto number = [&]() -> int64_t {
    if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) bad("a number is missing");
    int64_t v = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      v = v * 10 + (text[i++] - '0');
      if (v > 100000) bad("a layer index is too large");
    }
    return v;
  };
  while (i < text.size()) {
    int64_t a = number(), b = a;
    if (i < text.size() && text[i] == '-') {
      ++i;
      b = number();
      if (b < a) bad("a range runs backwards");
    }
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
    if (i < text.size()) {
      if (text[i] != ',') bad(std::string("unexpected character '") + text[i] + "'");
      if (++i == text.size()) bad("a number is missing after the last ','");
    }
  }
  if (out.empty()) bad("no layers");
  std::vector<int64_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) bad("a layer is listed twice");
  // The layers run in the model's order: "1,0" was sorted into 0,1 silently (and echoed as 1,0).
  if (sorted != out) bad("the layers are not in ascending order (they run in the model's order)");
  return out;
}

GgmlType parse_export_type(const std::string& t) {
  static const std::map<std::string, GgmlType> types = {{"f32", GgmlType::F32},   {"f16", GgmlType::F16},
                                                        {"q8_0", GgmlType::Q8_0}, {"q4_0", GgmlType::Q4_0},
                                                        {"q4_1", GgmlType::Q4_1}};
  auto it = types.find(t);
  if (it == types.end())
    throw Error(ErrorKind::kConfig, "expected f32, f16, q8_0, q4_0 or q4_1; found '" + t + "'", "command line", "--type");
  return it->second;
}

void ExportOptions::validate(int64_t n_layers, const std::string& source) const {
  for (int64_t l : layers)
    if (l < 0 || l >= n_layers)
      throw Error(ErrorKind::kConfig,
                  "layer " + std::to_string(l) + " is out of range: " + source + " has layers 0.." +
                      std::to_string(n_layers - 1),
                  "command line", "--layers");
}

void export_gguf_layers(const std::string& source_path, const std::string& out_path, const ExportOptions& options) {
  GgufFile src = read_gguf(source_path);
  const std::string arch = src.get_string("general.architecture");
  const std::string count_key = arch + ".block_count";
  const int64_t n_layers = src.get_int(count_key);
  options.validate(n_layers, source_path);
  std::vector<int64_t> layers = options.layers;
  if (layers.empty())
    for (int64_t l = 0; l < n_layers; ++l) layers.push_back(l);
  std::map<int64_t, int64_t> renumber;
  for (size_t i = 0; i < layers.size(); ++i) renumber[layers[i]] = static_cast<int64_t>(i);

  GgufMetadata meta;
  for (const auto& [key, value] : src.metadata) {
    if (key == "general.file_type") continue;  // no longer describes the tensors
    if (key == count_key) {
      meta.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(layers.size())));
    } else if (key == "general.name") {
      // The blocks kept, as runs: "0-5", "0,2,4,29" ("0..29" named every block in between).
      std::string kept;
      for (size_t i = 0; i < layers.size();) {
        size_t j = i;
        while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
        kept += (kept.empty() ? "" : ",") + std::to_string(layers[i]) +
                (j > i ? "-" + std::to_string(layers[j]) : std::string());
        i = j + 1;
      }
      meta.emplace_back(key, GgufValue::str(value.s + " (layers " + kept + " of " + std::to_string(n_layers) + ")"));
    } else {
      meta.emplace_back(key, value);
    }
  }

  std::vector<HostTensor> storage;
  std::vector<GgufTensorToWrite> out;
  storage.reserve(src.tensors.size());
  for (const GgufTensorInfo& info : src.tensors) {
    std::string name = info.name;
    if (name.rfind("blk.", 0) == 0) {
      // blk.<layer>.<rest>, the layer a block of the source: "blk.5abc.x" read as layer 5, and
      // "blk.x.y" or a name without the second dot ended in an internal error.
      const size_t dot = name.find('.', 4);
      const std::string digits = dot == std::string::npos ? std::string() : name.substr(4, dot - 4);
      if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(digits) >= n_layers)
        throw Error(ErrorKind::kBadInput,
                    "expected a block tensor named blk.<layer>.<name> with a layer from 0 to " +
                        std::to_string(n_layers - 1) + " (" + count_key + ")",
                    source_path, "tensor " + name);
      const int64_t idx = std::stoll(digits);
      auto it = renumber.find(idx);
      if (it == renumber.end()) continue;
      name = "blk." + std::to_string(it->second) + name.substr(dot);
    }
    storage.push_back(src.load_tensor(info));
    GgufTensorToWrite t;
    t.name = name;
    t.shape = storage.back().shape;
    t.data = storage.back().data.data();
    const bool is_matrix = t.shape.size() >= 2 && t.shape.back() % 32 == 0;
    t.type = is_matrix ? options.type : GgmlType::F32;
    out.push_back(std::move(t));
  }
  try {
    write_gguf(out_path, meta, out);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kIo && e.field().empty()) throw Error(e.kind(), e.message(), e.file(), "--out");
    throw;
  }
}

}  // namespace speclab
