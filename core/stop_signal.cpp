// Stop signals (stop_signal.h): the handler records the first one; a second ends the process.
#include "core/stop_signal.h"

#include <csignal>
#include <cstdio>
#include <initializer_list>

namespace gridnn {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int signal) {
  if (g_signal != 0) {  // asked twice: stop now, the default way
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_signal = signal;
}

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal() { return g_signal; }

void ignore_stop_signals() {
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) std::signal(signal, SIG_IGN);
}

void clear_stop_signal() { g_signal = 0; }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default: {
      static thread_local char name[32];
      std::snprintf(name, sizeof name, "signal %d", signal);
      return name;
    }
  }
}

}  // namespace gridnn
