// SIGTERM and SIGINT as a request to checkpoint and stop: schedulers (Slurm, Kubernetes, the
// launcher) send SIGTERM before SIGKILL, and a user stops a run with Ctrl-C (SIGINT). The
// handler only records the signal (async-signal-safe); the trainer checks it after each
// optimizer step, agrees on it with the other ranks, saves a checkpoint and returns. A second
// SIGINT while the first is being honoured ends the process at once (the default action), as
// users expect of a second Ctrl-C.
#pragma once

namespace shardtrain {

// Installs the handler for SIGTERM and SIGINT (idempotent). Without it both keep their default
// action.
void install_stop_signal_handler();
// Installs the handler for SIGINT only (a run without checkpoints: it stops after the step).
void install_interrupt_handler();
// True once SIGTERM or SIGINT arrived after its handler was installed.
bool stop_signal_received();
// The signal that asked to stop (SIGTERM or SIGINT), 0 when none did.
int stop_signal_number();
// "SIGTERM" / "SIGINT" for stop_signal_number(), "" when none.
const char* stop_signal_name();

}  // namespace shardtrain
