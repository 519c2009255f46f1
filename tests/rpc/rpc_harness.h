/* Multi-process harness for the RPC tests: forks worker processes (common/
 * proc.h) before the parent (rank 0) starts its agent on a free loopback
 * port and hands them the real endpoint; children are leak-checked under
 * ASan and always reaped. */
#ifndef TRIB_TESTS_RPC_HARNESS_H
#define TRIB_TESTS_RPC_HARNESS_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"

#define H_MAX 8

/* Starts g afresh with n children running fn(idx, master, arg) once
 * proc_hand_out gives them rank 0's endpoint. */
static inline void h_spawn(struct proc_group *g, int n, proc_fn fn, void *arg)
{
    proc_group_init(g);
    for (int i = 0; i < n; i++)
        if (proc_fork(g, fn, arg, PROC_LEAK_CHECK) < 0) abort();
}

#endif
