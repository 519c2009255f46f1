/* A debugging hook for tests: with TRIB_DEBUG_DUMP=DIR in the environment,
 * the agent writes the policy's parameters before and after its first
 * update, and each observer the minibatch its first loss was computed on,
 * so a test can recompute that update in one process (tests/rl/
 * test_rl_equiv.c). Format: for each array, an int64 count then that many
 * float32s, little-endian (this machine's order). */
#ifndef TRIB_RL_DEBUG_DUMP_H
#define TRIB_RL_DEBUG_DUMP_H

#include <stdint.h>

/* DIR from TRIB_DEBUG_DUMP, or NULL when unset. */
const char *rl_debug_dump_dir(void);

/* Writes n arrays to DIR/name. 0, or -1 with rl_last_error(). */
int rl_debug_dump(const char *dir, const char *name, int n, const float *const *arrays, const int64_t *counts);

#endif
