/* Waits that say what they wait for: a thread that prints "PREFIX: waiting
 * for WHAT (N s so far)" on stderr after `first_s` seconds and every 5 s
 * after, until the wait ends (rl_notice_stop, or a `done` test turning
 * true). Used by the agent and the observers; the waits' own deadlines are
 * their callers' (e.g. rpc_opts.init_timeout_ms). */
#ifndef TRIB_RL_NOTICE_H
#define TRIB_RL_NOTICE_H

#include <stdbool.h>

#define RL_NOTICE_EVERY_S 5.0

struct rl_notice;

/* Starts the notice thread. prefix and what are copied. done (may be
 * NULL) is polled every 100 ms from the thread; once it returns true the
 * thread prints nothing more. Never NULL (aborts when no thread can be
 * made). */
struct rl_notice *rl_notice_start(const char *prefix, const char *what, double first_s, bool (*done)(void *),
                                  void *done_arg);

/* Ends the wait and joins the thread. Accepts NULL. */
void rl_notice_stop(struct rl_notice *n);

#endif
