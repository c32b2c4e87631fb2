#include "model/rope.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace feast {

std::vector<float> rope_inverse_frequencies(const ModelConfig& c) {
  const int hs = c.head_dim();
  FEAST_CHECK(hs % 2 == 0, "rotary embeddings need an even head size, got " << hs);
  std::vector<float> inv(static_cast<size_t>(hs / 2));
  for (int i = 0; i < hs / 2; ++i)  // 1 / theta^(2i / hs), in float32 as transformers computes it
    inv[size_t(i)] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(hs));
  const RopeScaling& s = c.rope_scaling;
  if (s.rope_type == "default") return inv;
  const float factor = float(s.factor);
  if (s.rope_type == "linear") {
    for (float& f : inv) f /= factor;
    return inv;
  }
  if (s.rope_type == "llama3") {
    // transformers' _compute_llama3_parameters: long wavelengths are slowed down by the factor,
    // short ones kept, and the band between blended smoothly. A Python number divided by a
    // tensor is the tensor's reciprocal times the number in PyTorch, so the same float32
    // operations are written here in that order (a wavelength an ulp away could land on the
    // other side of a band edge).
    const float old_context = float(s.original_max_position_embeddings);
    const float low = float(s.low_freq_factor);
    const float low_freq_wavelen = float(double(s.original_max_position_embeddings) / s.low_freq_factor);
    const float high_freq_wavelen = float(double(s.original_max_position_embeddings) / s.high_freq_factor);
    for (float& f : inv) {
      const float wavelen = (1.0f / f) * float(2.0 * M_PI);
      const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = ((1.0f / wavelen) * old_context - low) / float(s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      } else {
        f = scaled;
      }
    }
    return inv;
  }
  throw ConfigError("model.rope_scaling.rope_type = \"" + s.rope_type +
                    "\": expected \"default\", \"linear\" or \"llama3\"");
}

void rope_tables(const ModelConfig& c, std::vector<float>& cos, std::vector<float>& sin) {
  const std::vector<float> inv = rope_inverse_frequencies(c);
  const size_t half = inv.size();
  cos.assign(size_t(c.max_seq_len) * half, 0.0f);
  sin.assign(cos.size(), 0.0f);
  for (int t = 0; t < c.max_seq_len; ++t)
    for (size_t i = 0; i < half; ++i) {
      const float angle = float(t) * inv[i];  // float32, as transformers' rotary embedding
      cos[size_t(t) * half + i] = std::cos(angle);
      sin[size_t(t) * half + i] = std::sin(angle);
    }
}

}  // namespace feast
