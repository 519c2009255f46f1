/* Tensors: dtype, up to 4 dims, contiguous, on CPU or CUDA, over a
 * ref-counted storage with a version counter (docs/design.md §2). This header is
 * the core every other layer builds on; ops live in ops.h, autograd in
 * autograd.h, modules in nn.h. */
#ifndef TRIB_TENSOR_TENSOR_H
#define TRIB_TENSOR_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

#define TENSOR_MAX_DIMS 4

struct ag_node;

/* Raw memory of one or more tensors. `version` counts in-place writes:
 * autograd records it when a tensor is saved and checks it at backward. */
struct tensor_storage {
    atomic_int refcount;
    atomic_uint_fast64_t version;
    enum device device;
    size_t nbytes;
    void *data;                 /* host pointer (CPU) or device pointer */
};

struct tensor {
    atomic_int refcount;
    enum dtype dtype;
    enum device device;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t numel;
    struct tensor_storage *storage; /* swapped only under the tensor's lock */
    uint64_t id;                    /* process-unique, never reused */
    uint64_t saved_version;         /* storage version when snapshotted */
    bool requires_grad;
    struct ag_node *grad_fn;        /* owned ref; NULL for leaves */
    void (*grad_fn_drop)(struct ag_node *);  /* drops grad_fn's ref: set with it by autograd
                                                (tensor_set_grad_fn), so tensor.c frees a
                                                tensor without calling up into autograd.c */
    int output_nr;                  /* which output of grad_fn this is */
    struct tensor *grad;            /* owned ref; filled by tensor_backward */
};

/* ---- errors ------------------------------------------------------------ */

/* Message of the last recoverable error on this thread ("" if none). Every
 * function below that returns NULL/-1 sets it, naming the function.
 * A NULL tensor (or other NULL pointer argument) is such an error, never a
 * crash: "tensor_snapshot: input is NULL", "tensor_from_data: data is
 * NULL". Functions returning void do nothing on one but set the error;
 * tensor_nbytes answers 0, tensor_same_shape false; tensor_free and
 * tensor_retain accept NULL silently. */
const char *tensor_last_error(void);
/* Sets the thread's error message (printf-style); returns NULL so callers can
 * write `return tensor_error(...)`. For use by tensor/ code and its layers. */
void *tensor_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The module's setter as every module has it (common/error.h): sets the
 * text and returns -1. tensor_error is the same, returning NULL, for the
 * constructors and ops that return a tensor. */
int tensor_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tensor_clear_error(void);

/* ---- dtypes and shapes ------------------------------------------------- */

/* dtype_size, dtype_name and device_name: tensor/dtype.h. */
/* Writes "[2,3]" into buf (always NUL-terminated); returns buf. */
char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- construction and lifetime ----------------------------------------- */

/* A zero-filled tensor. Returns NULL (with error) on a bad dtype, ndim not in
 * 0..4, a negative dim, a size overflow, or CUDA requested when unavailable.
 * ndim 0 is a scalar (numel 1). Aborts only on out-of-memory. */
struct tensor *tensor_new(enum dtype dt, enum device dev, int ndim, const int64_t *shape);
/* Like tensor_new on the CPU, then copies numel*dtype_size bytes from data. */
struct tensor *tensor_from_data(enum dtype dt, int ndim, const int64_t *shape, const void *data);
/* Convenience for f32 on the CPU. */
struct tensor *tensor_from_f32(int ndim, const int64_t *shape, const float *data);
struct tensor *tensor_scalar_f32(float v);

/* Takes another reference; returns t (NULL for NULL). Thread-safe. */
struct tensor *tensor_retain(struct tensor *t);
/* Drops a reference; frees the tensor (and its storage, grad_fn, grad refs)
 * when it was the last. Accepts NULL. Thread-safe. */
void tensor_free(struct tensor *t);

/* A new tensor struct sharing t's storage (storage retained), recording the
 * storage version in saved_version; no grad_fn, requires_grad false. Reads
 * the storage pointer under t's lock, so it is safe against a concurrent
 * tensor_mutable_data. Ops read inputs and save tensors through this. */
struct tensor *tensor_snapshot(struct tensor *t);

/* Data for an in-place write (optimizer step, fill). Copy-on-write: if any
 * other tensor shares the storage (a snapshot saved by a live graph, say),
 * t gets a fresh storage holding a copy first, so the sharers keep the old
 * values. Bumps the version. Takes t's lock; the caller must serialise
 * writers of one tensor. */
void *tensor_mutable_data(struct tensor *t);

/* A staged write, for updating a tensor that other threads may be reading
 * (an optimizer step while forwards run): tensor_write_begin returns a
 * private copy of t's data (host or device pointer) to write into, and
 * tensor_write_end publishes it in one step and bumps the version. A
 * tensor_snapshot taken meanwhile sees the old values, never a mix (with
 * tensor_mutable_data, a snapshot taken while the caller is still writing
 * shares the storage being written). Costs one copy of the data. The caller
 * must serialise writers of one tensor; begin/end on one thread. */
struct tensor_write {
    struct tensor_storage *storage;   /* the private copy until end */
};
void *tensor_write_begin(struct tensor *t, struct tensor_write *w);
/* tensor_write_end with a NULL w, or a w whose begin failed, does nothing
 * (error set); with a NULL t it drops w's private copy (error set). */
void tensor_write_end(struct tensor *t, struct tensor_write *w);
/* A staged write of t's whole data from host memory (nbytes must be t's
 * size), on whatever device t lives: loading a checkpoint into a GPU
 * module. 0, or -1 with tensor_last_error() on a size mismatch. */
int tensor_write_from_host(struct tensor *t, const void *src, size_t nbytes);

/* Read access to the data (host or device pointer). Not synchronised with
 * tensor_mutable_data: use tensor_snapshot for tensors another thread may
 * update. */
static inline void *tensor_data(const struct tensor *t)
{
    return t ? t->storage->data : tensor_error("tensor_data: input is NULL");
}
static inline float *tensor_f32(const struct tensor *t)
{
    return t ? (float *)t->storage->data : (float *)tensor_error("tensor_f32: input is NULL");
}
static inline size_t tensor_nbytes(const struct tensor *t)
{
    if (t) return (size_t)t->numel * dtype_size(t->dtype);
    tensor_error("tensor_nbytes: input is NULL");
    return 0;
}

/* Copies the data to host memory dst (tensor_nbytes bytes), from any device.
 * A NULL t (or NULL dst for a non-empty t) copies nothing and sets the error. */
void tensor_copy_to_host(const struct tensor *t, void *dst);
/* A copy on `dev` (no autograd; see tensor_to in ops.h for the recorded one).
 * Returns NULL with error if the device is unavailable. */
struct tensor *tensor_clone_to(const struct tensor *t, enum device dev);
/* Same dtype, ndim and shape. */
bool tensor_same_shape(const struct tensor *a, const struct tensor *b);

void tensor_set_requires_grad(struct tensor *t, bool on);   /* NULL: no-op, error set */
/* Releases t->grad (sets it NULL). Not synchronised with a backward on
 * another thread delivering into t->grad (autograd.h): callers serialise
 * the two, as they do any read of t->grad. */
void tensor_zero_grad(struct tensor *t);

/* Whether a CUDA device is usable in this process (backend built and a
 * device present). Cheap after the first call. */
bool tensor_cuda_available(void);

/* Threads the CPU backend's BLAS may use (OpenBLAS's pool; n >= 1). Processes
 * that share a few cores with others (the RL system's agent and observers)
 * set 1: OpenBLAS's idle threads spin and the small matrices gain nothing. */
void tensor_set_cpu_threads(int n);

#endif
