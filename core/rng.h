// Counter-based random numbers: element i of a stream is a pure function of (seed, stream, i).
// Initialisation draws every logical tensor as if unsharded (invariant 4), so any rank can
// produce exactly its slice without drawing the rest; the sampler uses the same hash so a batch
// is a function of (seed, step) alone (invariant 5).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/host_device.h"

namespace feast {

// SplitMix64 finaliser: a bijective 64-bit mixer with full avalanche.
FEAST_HD uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

FEAST_HD uint64_t hash_combine(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }

// FNV-1a of a name: a stable stream id for a parameter's logical name.
inline uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Uniform in (0, 1], from the top 53 bits.
FEAST_HD double uniform01(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Standard normal number i of stream (seed, stream) by Box-Muller on two hashed uniforms.
FEAST_HD double normal_at(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t base = hash_combine(seed, stream);
  const double u1 = uniform01(hash_combine(base, 2 * i));
  const double u2 = uniform01(hash_combine(base, 2 * i + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Integer in [0, n) number i of stream (seed, stream); n > 0. The modulo bias is below 2^-40
// for every n a sampler uses.
FEAST_HD uint64_t uniform_index(uint64_t seed, uint64_t stream, uint64_t i, uint64_t n) {
  return hash_combine(hash_combine(seed, stream), i) % n;
}

}  // namespace feast
