/* Private to pg/: the rendezvous store over RPC (store.c) and the NCCL
 * communicator (nccl.c, built when the CUDA toolkit has NCCL). */
#ifndef TRIB_PG_PG_INTERNAL_H
#define TRIB_PG_PG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

/* Sets the thread's pg_last_error() (printf-style); returns -1. For ddp.c. */
int pg_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- store.c: group rank 0 hosts its group's keys; members reach them by RPC
 *
 * A store holds only the groups it hosts (those whose rank 0 is this
 * process, between pg_new and pg_free). Every call is checked against the
 * caller identity the RPC layer verified (the connection, never a name in
 * the payload): only a member of a hosted group may read or write its
 * keys, and only the keys the rendezvous uses, each by the rank that owns
 * it: Gloo's "<r>" (group rank r's addresses, at most PG_STORE_ADDR_BYTES
 * per member) and "rank_<r>" (its host name, at most PG_STORE_HOST_BYTES)
 * by rank r; "nccl_id.<n>" (the NCCL unique id, PG_NCCL_ID_BYTES) by rank
 * 0, at most PG_STORE_NCCL_KEYS of them. A key is written once. So a
 * group's keys are bounded by 2 * size + PG_STORE_NCCL_KEYS and its bytes
 * by size * (size * PG_STORE_ADDR_BYTES + PG_STORE_HOST_BYTES) +
 * PG_STORE_NCCL_KEYS * PG_NCCL_ID_BYTES; everything else is refused with a
 * message naming it. */

#define PG_STORE_ADDR_BYTES 256   /* Gloo's transport::Address::kMaxByteSize is 192 */
#define PG_STORE_HOST_BYTES 256   /* HOST_NAME_MAX is 64 */
#define PG_STORE_NCCL_KEYS 4

/* Registers pg._store_join/set/get. */
void pg_store_register(void);
/* Hosts group `group` of the n members workers[0..n) (in group-rank
 * order; this worker is workers[0]) until pg_store_unhost. 0, or -1 with
 * err when a group of that name is hosted here already. */
int pg_store_host(const char *group, int n, const char (*workers)[64], char *err, size_t cap);
/* Drops the group and every key of it held here. */
void pg_store_unhost(const char *group);
/* Waits (at most timeout_ms) until `server` hosts group, then checks that
 * it lists the same members as workers[0..n). 0, or -1 with err (timeout,
 * server gone, not a member, another member list). */
int pg_store_join(const char *server, const char *group, int n, const char (*workers)[64], int timeout_ms,
                  char *err, size_t cap);
/* Sets key of group `group` on worker `server`. 0, or -1 with err. */
int pg_store_set(const char *server, const char *group, const char *key, const void *data, size_t n, char *err,
                 size_t cap);
/* Polls until key exists on `server` (at most timeout_ms); a new malloc'ed
 * copy in *data. 0, or -1 with err (timeout, server gone, refused). */
int pg_store_get(const char *server, const char *group, const char *key, int timeout_ms, void **data, size_t *n,
                 char *err, size_t cap);

/* ---- process_group.c: agreement before a collective
 *
 * Every collective first allgathers a fixed-size descriptor from every
 * member (what it is in, its argument, the tensor's dtype, device class
 * and shape): a mismatch fails the call on every member alike, with an
 * error naming both sides, before any data moves (so Gloo and NCCL never
 * see two sizes). */

enum pg_op { PG_OP_ALLREDUCE = 1, PG_OP_BROADCAST, PG_OP_ALLGATHER, PG_OP_BARRIER, PG_OP_DDP_NEW, PG_OP_END };

/* A tensor as words: dtype, device, ndim, shape[TENSOR_MAX_DIMS]. */
#define PG_TENSOR_WORDS (3 + TENSOR_MAX_DIMS)
void pg_tensor_words(const struct tensor *t, int64_t *w);
/* Whether w (from a peer) describes a tensor this build knows. */
bool pg_tensor_words_valid(const int64_t *w);
/* "f32[8,16]", "f32[]" for a scalar, " on cuda" appended for CUDA. */
void pg_tensor_words_format(const int64_t *w, char *out, size_t cap);

struct process_group;
/* A collective named by op: every member passes nwords words (the call
 * first agrees on op and nwords, failing on every member when they
 * differ); all[size * nwords] gets every member's, in group-rank order.
 * 0, or -1 with pg_last_error() ("<op's name>: group 'g': ..."). */
int pg_exchange(struct process_group *g, enum pg_op op, const int64_t *mine, int nwords, int64_t *all);
/* "rank 1 (worker 'w1')" */
void pg_member_format(const struct process_group *g, int r, char *out, size_t cap);

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
