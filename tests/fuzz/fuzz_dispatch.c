/* libFuzzer target: what a received message goes through, up to and
 * including its handler, on the offline agent (rpc_offline_init: the
 * agent's state and builtins without sockets or threads). A world of three:
 * this worker is rank 0 (the rendezvous) or rank 1, and the other two
 * workers' router connections are verified; a stranger's is not.
 *
 * Input: a role byte (bit 0 set: this worker is rank 0), then messages,
 * each a channel byte, a frame count byte and that many frames
 * (fuzz_frames.h). Channels (mod 5): 0, 1 the router connections of the
 * two other workers (the lower rank first), 2 a stranger's, 3, 4 the
 * dealers to the two other workers, whose responses may answer the calls
 * with request ids 1..4 this worker has in flight to each. Handler jobs
 * run after each message. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_frames.h"
#include "rpc/dist_autograd.h"
#include "rpc/rpc_agent.h"

#define MAX_FRAMES (1 + WIRE_MAX_TENSORS + 1)
#define MAX_MESSAGES 64

static int fn_echo(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_value_copy(args);
    return 0;
}

static int fn_fail(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    return rpc_request_fail(req, "failed on purpose");
}

static void complete_job(void *arg)
{
    struct rpc_value v = rpc_int(1);
    rpc_request_complete(arg, &v);
}

/* defers its reply to a handler job */
static int fn_defer(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    rpc_pool_submit(complete_job, req);
    return RPC_DEFERRED;
}

/* makes a call of its own (which fails at once: offline) */
static int fn_call(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_value r;
    if (rpc_sync("fz0", "echo", args, &r, 0) == 0) rpc_value_clear(&r);
    *res = rpc_str(rpc_last_error());
    return 0;
}

static void register_once(void)
{
    static bool done;
    if (done) return;
    done = true;
    dist_autograd_init();
    rpc_register("echo", fn_echo, NULL);
    rpc_register_ex("echo_inline", fn_echo, NULL, RPC_FN_INLINE);
    rpc_register("fail", fn_fail, NULL);
    rpc_register("defer", fn_defer, NULL);
    rpc_register("call", fn_call, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static zmq_msg_t frames[MAX_FRAMES];
    if (size < 1) return 0;
    register_once();
    int self = data[0] & 1 ? 0 : 1;
    data++;
    size--;
    char name[8];
    snprintf(name, sizeof name, "fz%d", self);
    if (rpc_offline_init(name, self, 3) < 0) abort();
    int others[2], k = 0;
    for (int i = 0; i < 3; i++) {
        char n[8], ep[32];
        snprintf(n, sizeof n, "fz%d", i);
        snprintf(ep, sizeof ep, "offline://fz%d", i);
        rpc_add_peer(i, n, ep, false);
        if (i != self) others[k++] = i;
    }
    static const unsigned char rids[3][5] = { { 0, 0, 0, 0, 1 }, { 0, 0, 0, 0, 2 }, { 0, 0, 0, 0, 3 } };
    rpc_conn_bind(rids[0], 5, others[0]);
    rpc_conn_bind(rids[1], 5, others[1]);
    struct rpc_future *calls[8];
    for (int i = 0; i < 8; i++) calls[i] = rpc_offline_expect(others[i / 4], 1 + i % 4, "echo");
    for (int m = 0; m < MAX_MESSAGES && size >= 2; m++) {
        int channel = data[0] % 5, count = data[1];
        data += 2;
        size -= 2;
        int n = fuzz_frames(&data, &size, count, frames, MAX_FRAMES);
        if (n == 0) continue;
        if (channel < 3) {
            struct conn *c = rpc_conn_get(rids[channel], 5, NULL);
            if (c) rpc_handle_router(c, frames, n);
        } else {
            rpc_handle_dealer(others[channel - 3], frames, n);
        }
        fuzz_close(frames, n);
        rpc_offline_run_jobs();
        rpc_conn_poll();
    }
    rpc_offline_fini();
    for (int i = 0; i < 8; i++) rpc_future_free(calls[i]);
    return 0;
}
