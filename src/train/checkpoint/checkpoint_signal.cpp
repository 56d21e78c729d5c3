#include "train/checkpoint/checkpoint_signal.h"

#include <csignal>

namespace shardtrain {
namespace {

volatile std::sig_atomic_t stop_requested = 0;  // the first stop signal's number

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && stop_requested == SIGINT) {
    // A second Ctrl-C: the user does not want to wait for the checkpoint.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  if (stop_requested == 0) stop_requested = sig;
}

void install(int sig) {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking I/O and collectives continue after the flag is set
  sigaction(sig, &action, nullptr);
}

}  // namespace

void install_stop_signal_handler() {
  install(SIGTERM);
  install(SIGINT);
}

void install_interrupt_handler() { install(SIGINT); }

bool stop_signal_received() { return stop_requested != 0; }

int stop_signal_number() { return stop_requested; }

const char* stop_signal_name() {
  switch (stop_requested) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "";
  }
}

}  // namespace shardtrain
