#include "models/llama/kv_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace speclab::cpu {

void quantize_kv_heads(const float* x, int64_t heads, int64_t D, int8_t* out) {
  for (int64_t h = 0; h < heads; ++h, x += D, out += D + kKvInt8ScaleBytes) {
    float amax = 0.f;
    for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[d]));
    const float scale = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t d = 0; d < D; ++d) {
      const float r = std::nearbyint(x[d] * inv);
      out[d] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    }
    std::memcpy(out + D, &scale, sizeof(float));
  }
}

void dequantize_kv_heads(const int8_t* in, int64_t heads, int64_t D, float* x) {
  for (int64_t h = 0; h < heads; ++h, in += D + kKvInt8ScaleBytes, x += D) {
    float scale;
    std::memcpy(&scale, in + D, sizeof(float));
    for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>(in[d]) * scale;
  }
}

}  // namespace speclab::cpu
