// Where memory lives and work runs: the CPU, or one CUDA GPU by index. A value type, like
// PyTorch's c10::Device; tensors carry one so that every op and copy can check that its operands
// are where it expects them.
#pragma once

#include <string>

namespace feast {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // the GPU's ordinal; 0 for the CPU

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::kCpu; }
  std::string name() const;  // "cpu", "cuda:1"
};

inline constexpr Device kCpu{};

}  // namespace feast
