#include "model/layers/activation_memory.h"

#include "core/error.h"

namespace feast {

Recompute recompute_from_name(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw ConfigError("training.recompute = \"" + name + "\" is not one of \"none\", \"selective\", \"full\"");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

std::vector<TensorView> ActivationMemory::take(bool saved, DType dtype, size_t numel) {
  if (saved) {
    std::vector<TensorView> views;
    for (int s = 0; s < slots_; ++s) {
      saved_.push_back(backend_.allocate(dtype, numel));
      saved_bytes_ += saved_.back().bytes();
      views.push_back(saved_.back().view());
    }
    return views;
  }
  if (cursor_ == recompute_.size()) recompute_.push_back(backend_.allocate(dtype, numel));
  const Tensor& t = recompute_[cursor_++];
  FEAST_CHECK(t.view().dtype == dtype && t.numel() == numel,
              "a recomputed block asks for other buffers than the stage's first recomputed block");
  return std::vector<TensorView>(size_t(slots_), t.view());
}

size_t ActivationMemory::recompute_bytes() const {
  size_t total = 0;
  for (const Tensor& t : recompute_) total += t.bytes();
  return total;
}

}  // namespace feast
