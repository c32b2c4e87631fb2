// Which network NCCL uses between nodes, from NCCL's own report: NCCL has no call that says, but
// its INFO lines do ("Using network IB", "NET/IB : Using [0]mlx5_0:1/IB ..."). Rank 0 routes
// them to a file of its run directory before its first NCCL communicator and reads them after.
// The parser is pure, so it is tested on NCCL's published line formats without NCCL.
#pragma once

#include <string>

namespace feast {

// Before the first NCCL communicator of this process: unless NCCL_DEBUG is already set (the
// user's own NCCL logging wins) or `dir` is empty or cannot be made, sends NCCL's INFO lines
// about init and the network to <dir>/nccl_debug.<pid>.log and returns that path; "" otherwise.
std::string capture_nccl_network_report(const std::string& dir);

// The network in NCCL's INFO lines: "IB ([0]mlx5_0:1/IB [1]mlx5_1:1/IB)", "Socket ([0]eth0:10.0.0.1<0>)",
// the network's name alone when no device line is there, or "" when no line says.
std::string nccl_network_from_log(const std::string& text);

}  // namespace feast
