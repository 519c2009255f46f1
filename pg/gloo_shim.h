/* A thin C interface over Gloo (C++), private to pg/: a full-mesh Gloo
 * context made through a caller-supplied key-value store, and the few
 * collectives the process groups use on host buffers. Every call catches
 * every exception and returns -1 with the message in err; none throws.
 * The callers must agree on sizes beforehand: Gloo's event-loop thread
 * aborts the process when a peer sends more than the buffer holds. */
#ifndef TRIB_PG_GLOO_SHIM_H
#define TRIB_PG_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rendezvous store Gloo's connectFullMesh writes and reads through.
 * get polls until the key exists or timeout_ms pass; it returns a new
 * malloc'ed copy of the value. Both return 0, or -1 with a message in err. */
struct gloo_store_ops {
    int (*set)(void *user, const char *key, const void *data, size_t n, char *err, size_t cap);
    int (*get)(void *user, const char *key, int timeout_ms, void **data, size_t *n, char *err, size_t cap);
};

struct gloo_ctx;

/* Connects rank of size over TCP on `host` (the address peers reach this
 * process on), exchanging addresses through the store; every collective
 * times out after timeout_ms. Blocks until every rank is connected. NULL
 * with err on failure. */
struct gloo_ctx *gloo_ctx_new(int rank, int size, const char *host, const struct gloo_store_ops *store, void *user,
                              int timeout_ms, char *err, size_t cap);
void gloo_ctx_free(struct gloo_ctx *c);

/* In place over n elements of dt at buf: the sum across ranks. */
int gloo_allreduce_sum(struct gloo_ctx *c, void *buf, size_t n, enum dtype dt, uint32_t tag, char *err, size_t cap);
/* nbytes at buf from root to every rank. */
int gloo_broadcast(struct gloo_ctx *c, void *buf, size_t nbytes, int root, uint32_t tag, char *err, size_t cap);
/* out (size * nbytes) = every rank's nbytes of in, in rank order. */
int gloo_allgather(struct gloo_ctx *c, const void *in, void *out, size_t nbytes, uint32_t tag, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
