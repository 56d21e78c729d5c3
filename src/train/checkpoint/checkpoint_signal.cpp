#include "train/checkpoint/checkpoint_signal.h"

#include <csignal>

namespace shardtrain {
namespace {

volatile std::sig_atomic_t stop_requested = 0;

extern "C" void on_stop_signal(int) { stop_requested = 1; }

}  // namespace

void install_stop_signal_handler() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking I/O and collectives continue after the flag is set
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_signal_received() { return stop_requested != 0; }

}  // namespace shardtrain
