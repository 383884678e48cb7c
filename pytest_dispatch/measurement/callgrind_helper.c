/* pytest-dispatch's callgrind client requests (counted mode, --dispatch-instructions).
 *
 * Built at first use against Valgrind's own header (valgrind/callgrind.h, in Debian's
 * `valgrind` package) into a small shared library that the meter loads with ctypes.
 * Outside Valgrind every request is a no-op.  Collection is toggled per thread, so
 * only the thread that opens a window is counted. */
#include <valgrind/callgrind.h>

int pytest_dispatch_running_on_valgrind(void) { return RUNNING_ON_VALGRIND; }

void pytest_dispatch_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }

void pytest_dispatch_stop_instrumentation(void) { CALLGRIND_STOP_INSTRUMENTATION; }

/* Open a window: forget what was counted so far, then count this thread. */
void pytest_dispatch_window_open(void) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
}

/* Close it: stop counting this thread, then write the window's counts to a dump named `label`. */
void pytest_dispatch_window_close(const char *label) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(label);
}
