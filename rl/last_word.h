/* How a process ended, in words, and a crashing process's last word: an
 * observer that crashes (SIGSEGV in a plug-in's step, an abort) tells its
 * agent before it dies, so the agent drops it at once and says it crashed
 * instead of waiting for its heartbeats to stop. */
#ifndef TRIB_RL_LAST_WORD_H
#define TRIB_RL_LAST_WORD_H

#include <stdbool.h>
#include <stddef.h>

#define RL_LAST_WORD_MS 1500        /* the most a crash waits for its last word before dying */

/* Whether sig is a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS,
 * SIGTRAP) rather than a kill. */
bool rl_is_crash_signal(int sig);

/* How a process ended, as "crashed (signal 11, SIGSEGV)", "was killed
 * (signal 9, SIGKILL)" or "exited with status 1": sig the signal that
 * ended it (0: it exited with status). Into out (cap bytes). */
void rl_describe_end(int sig, int status, char *out, size_t cap);

/* Installs handlers of the crash signals (but SIGSYS and SIGTRAP) and
 * starts the thread that speaks for them: on a crash, fn(sig, user) runs on
 * that thread (it may allocate and make RPC calls) while the crashing
 * thread waits at most RL_LAST_WORD_MS; then the signal takes its default
 * action, so the process dies of it as it would have (its status, a core).
 * A second crash, in fn or elsewhere, dies at once. Once per process (a
 * second call with the same fn and user does nothing); 0, or -1 with
 * rl_last_error(). */
int rl_last_word_install(void (*fn)(int sig, void *user), void *user);

#endif
