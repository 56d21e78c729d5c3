// shardtrain_test_worker: the shipped `shardtrain` (cli/main_entry.h) plus the test hooks its
// SHARDTRAIN_TEST_* variables ask for (cli/testing/test_worker_hooks.h). Built beside the
// product for the tests and tools/device scripts that need a worker to hang, write slowly or
// run a forced attention kernel; never installed.
#include "cli/main_entry.h"
#include "cli/testing/test_worker_hooks.h"

int main(int argc, char** argv) {
  return shardtrain::cli::run_main(argc, argv,
                                   shardtrain::testing::test_worker_hooks_from_environment);
}
