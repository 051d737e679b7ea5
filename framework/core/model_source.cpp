#include "framework/core/model_source.h"

#include "framework/core/error.h"

namespace speclab {

void ModelSource::validate() const {
  if (path.empty()) throw Error(ErrorKind::kConfig, "expected a model path or named entry, found nothing", "model", "path");
  if (format != "auto" && format != "gguf" && format != "safetensors" && format != "llama2c")
    throw Error(ErrorKind::kConfig,
                "expected one of auto, gguf, safetensors, llama2c; found '" + format + "'", "model", "format");
  if (weights != "native" && weights != "f32")
    throw Error(ErrorKind::kConfig, "expected native or f32, found '" + weights + "'", "model", "weights");
  if (activations != "auto" && activations != "f32" && activations != "int8")
    throw Error(ErrorKind::kConfig, "expected auto, f32 or int8, found '" + activations + "'", "model", "activations");
}


}  // namespace speclab
