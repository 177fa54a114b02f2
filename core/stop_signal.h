// Stop signals: SIGTERM (what Slurm sends at preemption and at the time limit), SIGINT
// (Ctrl-C) and SIGUSR1 (sbatch --signal=USR1@120 sends it ahead of the limit).
//
// After install_stop_signals(), such a signal only records itself; the training loop reads
// stop_signal() at every step boundary, the ranks agree on it (one of them may be the only one
// signalled) and stop together, with a checkpoint (models/train/trainer.h). A second signal
// while the first is still pending ends the process at once, as if nothing were installed.
// SIGXFSZ (a file-size limit hit while saving) is ignored, so the write fails with EFBIG and
// the save reports it instead of the process dying.
#pragma once

namespace gridnn {

// Installs the handlers (idempotent; process-wide).
void install_stop_signals();
// The first stop signal received since the last clear (SIGTERM, SIGINT, SIGUSR1), or 0.
int stop_signal();
// From now on stop signals are ignored: for a process that has saved its work and is on its
// way out (mpiexec signals the other ranks once one exits with a non-zero status, and they
// must still finish with the same status).
void ignore_stop_signals();
void clear_stop_signal();
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char* stop_signal_name(int signal);

}  // namespace gridnn
