/* Private to tensor/: helpers shared by the ops_*.c files (validation,
 * graph-free kernels over whole tensors, the generic saved-state context of
 * op nodes). Not part of the public contract; other layers use ops.h. */
#ifndef TRIB_TENSOR_OPS_INTERNAL_H
#define TRIB_TENSOR_OPS_INTERNAL_H

#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

/* Saved state of an op node: snapshots (owned), the inputs' shapes (for
 * broadcast backward) and a few op parameters. */
struct op_ctx {
    int n_saved;
    struct tensor *saved[4];
    int ndim[4];
    int64_t shape[4][TENSOR_MAX_DIMS];
    enum device dev[4];
    float a, b;
    int64_t iv[4];
    int n_sizes;
    int64_t *sizes;          /* split/cat piece sizes (owned) */
    /* set by op_record: the op's backward and its output's geometry, which
     * every incoming gradient is checked against before the backward runs */
    ag_backward_fn fn;
    int out_ndim;
    int64_t out_shape[TENSOR_MAX_DIMS];
    enum device out_dev;
};

static inline const struct tensor_backend *op_be(const struct tensor *t) { return tensor_backend_for(t->device); }
static inline float *op_f32(const struct tensor *t) { return (float *)t->storage->data; }

/* Validation; each returns 0 or -1 with tensor_error naming `who`. A NULL
 * tensor (a failed op's result passed on) is "who: input is NULL" in each. */
int op_check_input(const char *who, const struct tensor *x);
int op_check_f32(const char *who, const struct tensor *x);
int op_check_pair(const char *who, const struct tensor *a, const struct tensor *b);
/* NumPy broadcast of a and b's shapes into (ndim, out); -1 with
 * "who: shape mismatch: [..] and [..]". */
int op_broadcast_shape(const char *who, const struct tensor *a, const struct tensor *b,
                       int *ndim, int64_t out[TENSOR_MAX_DIMS]);
/* Right-aligns a shape into 4 dims (leading 1s). */
void op_pad4(int ndim, const int64_t *shape, int64_t out[4]);
/* Whether an op with these inputs records a node. */
bool op_needs_grad(int n, struct tensor *const *xs);

/* Like tensor_new but the contents are undefined (defined in tensor.c). */
struct tensor *tensor_new_uninit(enum dtype dt, enum device dev, int ndim, const int64_t *shape);
/* tensor_new (zero) or tensor_new_uninit, but NULL with "tensor_new: cannot
 * allocate N bytes" where they would abort for want of memory. */
struct tensor *tensor_try_new(enum dtype dt, enum device dev, int ndim, const int64_t *shape, bool zero);
/* The backend of dev if it is built and a device is present; else NULL with
 * "<who>: the cuda backend is not built" / "<who>: no cuda device is available". */
const struct tensor_backend *usable_backend(enum device dev, const char *who);

/* A fresh f32 tensor on dev, contents undefined: for outputs a kernel
 * writes in full (aborts only on out-of-memory). op_zeros is zero-filled. */
struct tensor *op_empty(enum device dev, int ndim, const int64_t *shape);
struct tensor *op_empty_like(const struct tensor *x);
struct tensor *op_zeros(enum device dev, int ndim, const int64_t *shape);
/* The same (zero-filled if `zero`) for an output whose size its inputs do
 * not bound (a product of dims of empty inputs, which a peer may send):
 * NULL with "who: output shape [..] is too large" where tensor_new refuses
 * the shape or the memory cannot be allocated, instead of aborting. */
struct tensor *op_try_new(const char *who, enum device dev, int ndim, const int64_t *shape, bool zero);
/* Graph-free kernels over whole f32 tensors of one device. */
struct tensor *k_unary(enum kunary op, const struct tensor *x, float a, float b);
struct tensor *k_binary(enum kbinary op, const struct tensor *a, const struct tensor *b);
/* The same written into out (which may alias an input of out's shape, as
 * backend.h allows for element-wise kernels). out has the result's shape. */
void k_unary_into(struct tensor *out, enum kunary op, const struct tensor *x, float a, float b);
void k_binary_into(struct tensor *out, enum kbinary op, const struct tensor *a, const struct tensor *b);
/* x summed down to (ndim, shape), which x broadcasts from; a new reference
 * to x itself when the shapes are equal. */
struct tensor *k_sum_to(struct tensor *x, int ndim, const int64_t *shape);
/* scale * g broadcast up to (ndim, shape). */
struct tensor *k_expand(const struct tensor *g, int ndim, const int64_t *shape, float scale);
/* Same storage, another shape (numel must match). */
struct tensor *k_view(struct tensor *x, int ndim, const int64_t *shape);

/* Contexts and nodes. op_ctx_save takes ownership of the snapshot. */
struct op_ctx *op_ctx_new(void);
void op_ctx_save(struct op_ctx *c, struct tensor *snapshot);
void op_ctx_shape(struct op_ctx *c, int i, const struct tensor *x);
void op_ctx_free(struct op_ctx *c);
void op_release(struct ag_node *n);
/* Makes a node (1 output, n_in edges to the inputs' grad edges, ctx owned by
 * it) and sets it as out's grad_fn. */
void op_record(const char *name, struct tensor *out, int n_in, struct tensor *const *in,
               struct op_ctx *ctx, ag_backward_fn backward);
/* Whether gradient g fits an output of this geometry; -1 with
 * "<node>: gradient f32 [..] on cpu does not match the output f32 [..] on cpu". */
int op_check_grad(const struct ag_node *n, const struct tensor *g, int ndim, const int64_t *shape, enum device dev);
/* Checks every saved snapshot's version; -1 with error. */
int op_check_saved(const struct ag_node *n);
/* Whether a gradient is wanted for input i (its edge leads somewhere). */
static inline bool op_wants(const struct ag_node *n, int i) { return n->next[i].node != NULL; }

#endif
