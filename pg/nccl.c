/* NCCL communicators for the CUDA collectives of process groups
 * (pg_internal.h). Non-blocking communicators polled against a deadline,
 * so a member that died or stopped answering fails the operation (and
 * aborts the communicator) instead of hanging it. Built only when the CUDA
 * toolkit has NCCL (TRIB_WITH_NCCL). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"
#include "pg/pg_internal.h"
#include "pg/process_group.h"

_Static_assert(sizeof(ncclUniqueId) == PG_NCCL_ID_BYTES, "ncclUniqueId size");

struct pg_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int timeout_ms;
    bool aborted;
};

bool pg_has_nccl(void) { return true; }

static void nap(void)
{
    struct timespec ts = {0, 200 * 1000L};
    nanosleep(&ts, NULL);
}

/* Waits while the communicator's state is ncclInProgress (init, or an
 * enqueue of a non-blocking communicator). */
static ncclResult_t wait_state(struct pg_nccl *c, int64_t deadline)
{
    ncclResult_t st;
    for (;;) {
        if (ncclCommGetAsyncError(c->comm, &st) != ncclSuccess) return ncclInternalError;
        if (st != ncclInProgress || trib_now_ms() >= deadline) return st;
        nap();
    }
}

int pg_nccl_unique_id(void *id, char *err, size_t cap)
{
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
    if (r == ncclSuccess) return 0;
    snprintf(err, cap, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    return -1;
}

struct pg_nccl *pg_nccl_new(const void *id, int rank, int size, int timeout_ms, char *err, size_t cap)
{
    struct pg_nccl *c = trib_xcalloc(1, sizeof *c);
    c->timeout_ms = timeout_ms;
    cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        snprintf(err, cap, "cudaStreamCreate: %s", cudaGetErrorString(ce));
        free(c);
        return NULL;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, size, uid, rank, &config);
    if (r == ncclSuccess || r == ncclInProgress) r = wait_state(c, trib_now_ms() + timeout_ms);
    if (r != ncclSuccess) {
        snprintf(err, cap, "ncclCommInitRank: %s", r == ncclInProgress ? "timed out" : ncclGetErrorString(r));
        if (c->comm) ncclCommAbort(c->comm);
        cudaStreamDestroy(c->stream);
        free(c);
        return NULL;
    }
    return c;
}

void pg_nccl_free(struct pg_nccl *c)
{
    if (!c) return;
    if (!c->aborted) {
        if (ncclCommFinalize(c->comm) == ncclInProgress) wait_state(c, trib_now_ms() + c->timeout_ms);
        ncclCommDestroy(c->comm);
    }
    cudaStreamDestroy(c->stream);
    free(c);
}

/* After an enqueue returned r: waits for the stream within the timeout.
 * The default stream's earlier work (the tensor's producers) is ordered
 * before by the caller's synchronize. */
static int finish(struct pg_nccl *c, ncclResult_t r, const char *what, char *err, size_t cap)
{
    int64_t deadline = trib_now_ms() + c->timeout_ms;
    if (r == ncclInProgress) r = wait_state(c, deadline);
    while (r == ncclSuccess) {
        cudaError_t ce = cudaStreamQuery(c->stream);
        if (ce == cudaSuccess) return 0;
        if (ce != cudaErrorNotReady) {
            snprintf(err, cap, "%s: %s", what, cudaGetErrorString(ce));
            return -1;
        }
        ncclResult_t st;
        if (ncclCommGetAsyncError(c->comm, &st) != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
            r = st;
            break;
        }
        if (trib_now_ms() >= deadline) {
            r = ncclInProgress;
            break;
        }
        nap();
    }
    if (r == ncclInProgress)
        snprintf(err, cap, "%s timed out after %d ms", what, c->timeout_ms);
    else
        snprintf(err, cap, "%s: %s", what, ncclGetErrorString(r));
    ncclCommAbort(c->comm);
    c->aborted = true;
    return -1;
}

static int nccl_type(enum dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case DTYPE_F32: *out = ncclFloat32; return 0;
    case DTYPE_F64: *out = ncclFloat64; return 0;
    case DTYPE_I32: *out = ncclInt32; return 0;
    case DTYPE_I64: *out = ncclInt64; return 0;
    case DTYPE_U8: *out = ncclUint8; return 0;
    default: return -1;
    }
}

int pg_nccl_allreduce(struct pg_nccl *c, void *buf, size_t n, enum dtype dt, bool avg, char *err, size_t cap)
{
    ncclDataType_t t;
    if (nccl_type(dt, &t) != 0) {
        snprintf(err, cap, "ncclAllReduce: unsupported dtype");
        return -1;
    }
    cudaDeviceSynchronize();   /* the tensor's producers ran on the default stream */
    ncclResult_t r = ncclAllReduce(buf, buf, n, t, avg ? ncclAvg : ncclSum, c->comm, c->stream);
    return finish(c, r, "ncclAllReduce", err, cap);
}

int pg_nccl_broadcast(struct pg_nccl *c, void *buf, size_t nbytes, int root, char *err, size_t cap)
{
    cudaDeviceSynchronize();
    ncclResult_t r = ncclBroadcast(buf, buf, nbytes, ncclUint8, root, c->comm, c->stream);
    return finish(c, r, "ncclBroadcast", err, cap);
}
