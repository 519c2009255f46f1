/* The RL code shared by agent/ and observer/ (docs/design.md §6): only those two
 * programs include rl/. This header holds what every rl/ file needs: the
 * module's last-error text. */
#ifndef TRIB_RL_RL_H
#define TRIB_RL_RL_H

/* Message of the last recoverable error of an rl_* call on this thread
 * ("" if none). Every rl_* function that returns -1/NULL sets it. */
const char *rl_last_error(void);

/* Sets this thread's rl error text (printf-style); returns -1. */
int rl_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
