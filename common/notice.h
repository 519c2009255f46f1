/* Waits that say what they wait for: a thread that prints "PREFIX: waiting
 * for WHAT (N s so far)" on stderr after `first_s` seconds and every 5 s
 * after, until the wait ends (notice_stop, or a `done` test turning
 * true). Below every layer (it uses only common/); the agent and the
 * observers announce their waits with it. The waits' own deadlines are
 * their callers' (e.g. rpc_opts.init_timeout_ms). */
#ifndef TRIB_COMMON_NOTICE_H
#define TRIB_COMMON_NOTICE_H

#include <stdbool.h>

#define NOTICE_EVERY_S 5.0

struct notice;

/* Starts the notice thread. prefix and what are copied. done (may be
 * NULL) is polled every 100 ms from the thread; once it returns true the
 * thread prints nothing more. Never NULL (aborts when no thread can be
 * made). */
struct notice *notice_start(const char *prefix, const char *what, double first_s, bool (*done)(void *),
                             void *done_arg);

/* Ends the wait and joins the thread. Accepts NULL. */
void notice_stop(struct notice *n);

#endif
