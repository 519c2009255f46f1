/* Private to pg/: the rendezvous store over RPC (store.c) and the NCCL
 * communicator (nccl.c, built when the CUDA toolkit has NCCL). */
#ifndef TRIB_PG_PG_INTERNAL_H
#define TRIB_PG_PG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor/dtype.h"

/* Sets the thread's pg_last_error() (printf-style); returns -1. For ddp.c. */
int pg_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- store.c: group rank 0 holds every group's keys; members reach them by RPC */

/* Registers pg._store_set/get. */
void pg_store_register(void);
/* Sets key of group `group` on worker `server`. 0, or -1 with err. */
int pg_store_set(const char *server, const char *group, const char *key, const void *data, size_t n, char *err,
                 size_t cap);
/* Polls until key exists on `server` (at most timeout_ms); a new malloc'ed
 * copy in *data. 0, or -1 with err (timeout, server gone). */
int pg_store_get(const char *server, const char *group, const char *key, int timeout_ms, void **data, size_t *n,
                 char *err, size_t cap);
/* Drops every key of `group` held here (group rank 0 at pg_free). */
void pg_store_drop(const char *group);

/* ---- nccl.c --------------------------------------------------------------- */

#define PG_NCCL_ID_BYTES 128   /* sizeof(ncclUniqueId) */

struct pg_nccl;
/* A new unique id (rank 0). 0 or -1 with err. */
int pg_nccl_unique_id(void *id, char *err, size_t cap);
/* Joins the communicator of id as rank of size on the current CUDA device;
 * every operation is abandoned (and the communicator aborted) after
 * timeout_ms. NULL with err. */
struct pg_nccl *pg_nccl_new(const void *id, int rank, int size, int timeout_ms, char *err, size_t cap);
void pg_nccl_free(struct pg_nccl *c);
/* In place on device memory; blocks until done. 0 or -1 with err (the
 * communicator is aborted after a failure or timeout). */
int pg_nccl_allreduce(struct pg_nccl *c, void *buf, size_t n, enum dtype dt, bool avg, char *err, size_t cap);
int pg_nccl_broadcast(struct pg_nccl *c, void *buf, size_t nbytes, int root, char *err, size_t cap);

#endif
