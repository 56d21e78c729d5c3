// shardtrain entry point: the whole process is cli/main_entry.h's run_main, with no test hooks
// (the test worker binary, cli/testing/test_worker_main.cpp, is the same with them).
#include "cli/main_entry.h"

int main(int argc, char** argv) { return shardtrain::cli::run_main(argc, argv); }
