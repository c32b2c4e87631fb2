// main() for GoogleTest binaries that run under mpirun: MPI around the tests, output from rank
// 0 only (other ranks' failures still count), and a non-zero exit on every rank when any rank
// failed, so CTest sees one verdict for the whole job. A test that fails on one rank of several
// aborts the job: the ranks would otherwise go on out of step (one left a test early, the
// others wait in its collectives) until CTest's timeout.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  // As the trainer: MPI_THREAD_MULTIPLE when granted (the asynchronous checkpoint writer's thread
  // communicates beside the main thread).
  int granted = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &granted);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Keep failures visible: replace the default printer by one that reports failures only.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      int rank;
      explicit FailurePrinter(int r) : rank(r) {}
      void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed()) std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank, r.file_name(), r.line_number(), r.message());
      }
    };
    listeners.Append(new FailurePrinter(rank));
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    struct AbortOnFailure : ::testing::EmptyTestEventListener {
      int rank;
      explicit AbortOnFailure(int r) : rank(r) {}
      void OnTestEnd(const ::testing::TestInfo& test) override {
        if (!test.result()->Failed()) return;
        std::fprintf(stderr, "[rank %d] %s.%s failed: aborting the job so that no rank waits for it\n", rank,
                     test.test_suite_name(), test.name());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    };
    ::testing::UnitTest::GetInstance()->listeners().Append(new AbortOnFailure(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any && !failed) std::fprintf(stderr, "a test failed on another rank (see its [rank N] lines)\n");
  MPI_Finalize();
  return any;
}
