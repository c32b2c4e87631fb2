// Another program run from a verb (`plan --calibrate`'s `bench comm`, `plan --verify`'s
// training run, both through mpiexec): started in this process's environment less what ties a
// process to this one's MPI job, its output into a log, killed when it runs too long.
#pragma once

#include <string>
#include <vector>

namespace feast {

// Runs argv with this environment less what ties a process to this one's MPI job (a singleton's
// PMIx and Open MPI settings would make the child's mpiexec join it), plus `extra`; its output
// into `log`. The exit status, or -1 when it could not start or ran past `timeout_s` (killed).
int run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra, const std::string& log,
              double timeout_s);

// The last non-empty line of a file ("" when there is none): what a failed child said last.
std::string last_line_of(const std::string& path);

}  // namespace feast
