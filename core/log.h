// Progress and diagnostic output. Rank 0 prints progress; errors print on the rank that has
// them, prefixed with the rank so a multi-rank job's output says who failed.
#pragma once

#include <string>

namespace feast::log {

void set_rank(int rank);
int rank();
void info(const std::string& line);   // rank 0 only, stdout
void warn(const std::string& line);   // rank 0 only, stderr
void error(const std::string& line);  // every rank, stderr, prefixed "[rank r]"

}  // namespace feast::log
