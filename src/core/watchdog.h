#pragma once
// Where the process is, for a person watching a run that seems stuck (a GPU run that printed
// nothing for minutes could not say whether it was loading, prefilling or waiting on a device).
//   phase("...")      names the coarse step the process is in (opening the model, uploading
//                      weights, prefill, decode); with phase lines on (`-v`) each new phase is
//                      printed on stderr with the seconds since the start;
//   progress()         counts fine-grained progress inside it (a layer, a token): cheap, any
//   thread; MOEFLOW_WATCHDOG=S starts a thread that, when progress() has not moved for S seconds,
//   prints
//                      the phase, how long it has lasted and the stack of every thread of the
//                      process on stderr, once per stall (again after progress resumes and stops).
#include <cstdint>

namespace moeflow {

void phase(const char* name);
void progress();
// Phase lines on stderr ("moeflow: [  1.234 s] prefill: 512 tokens").
void set_phase_lines(bool on);
// Starts the watchdog when MOEFLOW_WATCHDOG holds a positive number of seconds; a value that is
// not one is reported once on stderr and ignored. Idempotent.
void start_watchdog_from_env();
// Starts the watchdog with this stall limit (seconds > 0). Idempotent: the first call wins.
void start_watchdog(double seconds);
// Prints the phase and every thread's stack on stderr now (the watchdog's report).
void report_threads(const char* why);
// Reports written so far (for tests).
uint64_t watchdog_reports();

}  // namespace moeflow
