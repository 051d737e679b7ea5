// speclab export — write a subset of a GGUF model's layers as a separate model file.
#include <filesystem>
#include <iostream>

#include "experiments/app/experiment_runner.h"
#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/core/regular_file.h"
#include "models/model_loader.h"
#include "models/loaders/export.h"

namespace speclab::cli {

int cmd_export(const std::vector<std::string>& args) {
  std::string model = "smollm2-135m-instruct", layers, out, type = "f32";
  bool overwrite = false;
  po::options_description desc("speclab export");
  desc.add_options()
      ("model,m", po::value(&model)->default_value(model), "source GGUF file or named entry")
      ("layers", po::value(&layers), "blocks to keep, e.g. 0-5 or 0,2,4 (default: all)")
      ("type", po::value(&type)->default_value(type), "tensor type of the output: f32 | f16 | q8_0 | q4_0 | q4_1")
      ("out,o", po::value(&out)->required(), "output .gguf path")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing --out file");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab export --model SRC --layers 0-5 --out draft.gguf", desc, args, vm)) return kExitOk;
  if (vm.count("layers") && layers.empty())
    throw Error(ErrorKind::kConfig, "expected a layer list like 0-5 or 0,2,4, found an empty one", "command line",
                "--layers");
  ModelSource src;
  src.path = model;
  try {
    src = resolve_model_source(src);
  } catch (const Error& e) {
    throw ModelArgs::flag_error(e);
  }
  if (src.format != "gguf")
    throw Error(ErrorKind::kConfig, "export reads GGUF models; found format " + src.format, src.path, "--model");
  ExportOptions opts;
  if (!layers.empty()) opts.layers = parse_layer_list(layers);
  opts.type = parse_export_type(type);
  // A model file's format is read from its extension: GGUF bytes named x.safetensors or x.bin
  // (written until 2026-12-06) then loaded as another format and failed.
  if (!out.empty() && !names_a_directory(out) && std::filesystem::path(out).extension() != ".gguf")
    throw Error(ErrorKind::kConfig,
                "expected a path ending in .gguf (export writes GGUF, and a model's format is read from its "
                "extension), found '" + out + "'",
                "command line", "--out");
  // After every option is parsed: the output's directory is made when missing (as `run` does); a
  // directory's path, or a directory at the path, is refused.
  ensure_output_directory(out, "--out");
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec))
    throw Error(ErrorKind::kConfig, "expected a file path, found a directory", out, "--out");
  if (std::filesystem::exists(out, ec) && !overwrite)
    throw Error(ErrorKind::kConfig, "expected no file at the output path, found one (pass --overwrite to replace it)",
                out, "--out");
  // --overwrite onto the model being read replaced it with the export (a named model then loaded
  // as the 2-layer draft, with no word).
  if (std::filesystem::equivalent(out, src.path, ec))
    throw Error(ErrorKind::kConfig, "expected an output other than the model it exports from, found " + src.path, out,
                "--out");
  export_gguf_layers(src.path, out, opts);
  std::cout << "wrote " << out << " (" << (layers.empty() ? std::string("all layers") : "layers " + layers) << ", "
            << type << ")\n";
  return kExitOk;
}

}  // namespace speclab::cli
