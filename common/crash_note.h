/* A crash that says what was running: around code the program does not
 * own (a plug-in's entry point or unload), a crash signal first prints
 * "PROG: crashed (signal 11, SIGSEGV) while WHAT" on stderr, then the
 * process dies of the signal as it would have (its status, a core).
 * Below every layer. */
#ifndef TRIB_COMMON_CRASH_NOTE_H
#define TRIB_COMMON_CRASH_NOTE_H

/* From here to crash_note_end, a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGABRT), on any thread, prints the line (formatted here, cut at 700
 * bytes) before it kills the process. Replaces the handlers those signals
 * had until crash_note_end puts them back. Not nested; one thread at a
 * time. */
void crash_note_begin(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void crash_note_end(void);

#endif
