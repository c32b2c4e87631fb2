// Progress and diagnostic output. Rank 0 prints progress; errors print on the rank that has
// them, prefixed with the rank so a multi-rank job's output says who failed.
#pragma once

#include <string>

namespace feast::log {

// This process's rank and the job's size; errors name the rank only in a job of several.
void set_rank(int rank, int world_size = 1);
// Rank 0 also appends what it prints (info and error) to `path` ("" stops); a run's train.log.
void set_file(const std::string& path);
// Rank 0: appends `line` to that file only (an end marker whose error was printed already).
void file_only(const std::string& line);
void info(const std::string& line);   // rank 0 only, stdout
void error(const std::string& line);  // every rank, stderr, prefixed "[rank r]" when there are several
// Rank 0 on a terminal: `line` becomes the status line at the bottom of the screen, redrawn in
// place (never written to the log file); the next info() line clears it first. Elsewhere (output
// to a file or a pipe, other ranks, Quiet) it prints nothing.
void status(const std::string& line);
// Whether rank 0's stdout is a terminal (status lines show).
bool stdout_is_terminal();
// Rank 0 only, stderr, as it is: what a verb whose stdout is its data (generate, tokenize) says
// about what it does.
void note(const std::string& line);

// While one exists, info() prints nothing (a benchmark that runs training quietly).
class Quiet {
 public:
  Quiet();
  ~Quiet();
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;
};

}  // namespace feast::log
