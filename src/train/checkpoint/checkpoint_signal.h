// SIGTERM as a request to checkpoint and stop: schedulers (Slurm, Kubernetes, the launcher) send
// SIGTERM before SIGKILL. The handler only sets a flag (async-signal-safe); the trainer checks it
// after each optimizer step, agrees on it with the other ranks, saves a checkpoint and returns.
#pragma once

namespace shardtrain {

// Installs the SIGTERM handler (idempotent). Without it SIGTERM keeps its default action.
void install_stop_signal_handler();
// True once SIGTERM arrived after install_stop_signal_handler().
bool stop_signal_received();

}  // namespace shardtrain
