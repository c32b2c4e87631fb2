// Errors for the whole project: library code throws typed errors, `main` catches them, prints
// one clear line and ends every rank. Each library (MPI, HDF5, CUDA, ...) gets its own check
// macro built on FEAST_CHECK so a failure names the call, the file and the line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace feast {

// Any error the user can act on (bad config, missing file, impossible layout).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The config is invalid; the message names the key, the file and line, and the fix.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A data file (token shard, text corpus) is missing or malformed; the message names the path.
class DataError : public Error {
 public:
  using Error::Error;
};

// An error the ranks of a job agreed on collectively (each knows some rank failed); only the
// rank chosen to report it prints the message, and every rank exits non-zero without MPI_Abort.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& message, bool report) : Error(message), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

namespace detail {
[[noreturn]] inline void throw_check_failure(const char* expr, const char* file, int line,
                                             const std::string& message) {
  std::ostringstream os;
  os << message << " (check `" << expr << "` failed at " << file << ":" << line << ")";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace feast

// FEAST_CHECK(cond, stream-expression): throws feast::Error naming the expression and place.
#define FEAST_CHECK(cond, msg)                                                         \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::ostringstream feast_check_os_;                                              \
      feast_check_os_ << msg;                                                          \
      ::feast::detail::throw_check_failure(#cond, __FILE__, __LINE__, feast_check_os_.str()); \
    }                                                                                  \
  } while (0)
