/* rpc_spawn: a local world of forked processes, the C counterpart of
 * torch.multiprocessing.spawn, so that a program (the examples, a user's
 * first experiment) runs its whole world with one command. Built on
 * common/proc (fork before any thread, hand out the endpoint, reap). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/proc.h"
#include "rpc/rpc.h"

struct spawn_ctx {
    rpc_spawn_fn fn;
    void *arg;
    int world_size;
};

static int spawn_main(int idx, const char *endpoint, void *arg)
{
    struct spawn_ctx *c = arg;
    return c->fn(idx, c->world_size, endpoint, c->arg);
}

static int child_failed(const struct proc *p, int rank)
{
    if (p->status == -1) return rpc_set_error("rpc_spawn: rank %d vanished", rank);
    if (p->sig) return rpc_set_error("rpc_spawn: rank %d killed by signal %d (%s)", rank, p->sig, strsignal(p->sig));
    return rpc_set_error("rpc_spawn: rank %d exited %d", rank, p->status);
}

int rpc_spawn(int world_size, rpc_spawn_fn fn, void *arg, double timeout_s)
{
    if (world_size < 1 || world_size > PROC_MAX)
        return rpc_set_error("rpc_spawn: world size %d is not in 1..%d", world_size, PROC_MAX);
    struct spawn_ctx c = { fn, arg, world_size };
    struct proc_group g;
    proc_group_init(&g);
    int rc = 0;
    for (int r = 0; r < world_size && rc == 0; r++)
        if (proc_fork(&g, spawn_main, &c, PROC_LEAK_CHECK) < 0)
            rc = rpc_set_error("rpc_spawn: fork of rank %d failed: %s", r, strerror(errno));
    int port = rc == 0 ? proc_free_port() : -1;
    if (rc == 0 && port < 0) rc = rpc_set_error("rpc_spawn: no free loopback port: %s", strerror(errno));
    if (rc == 0) {
        char ep[PROC_ENDPOINT_MAX];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
        proc_hand_out(&g, -1, ep);
    }
    for (int left = world_size; rc == 0 && left > 0; left--) {
        int i = proc_wait_any(&g, timeout_s);
        if (i < 0) {
            for (i = 0; i < g.n && g.p[i].reaped; i++) {}
            rc = rpc_set_error("rpc_spawn: rank %d still running after %g s", i, timeout_s);
        } else if (g.p[i].status != 0) {
            rc = child_failed(&g.p[i], i);
        }
    }
    proc_group_deinit(&g);   /* after a failure: kills the ranks still running */
    return rc;
}
