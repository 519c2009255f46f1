/* Differentiable tensor operations (docs/design.md §2). Every op:
 *  - returns a new tensor reference, or NULL with tensor_last_error() naming
 *    the op and the problem, e.g.
 *      "tensor_matmul: shape mismatch: [2,3] x [4,5]"
 *      "tensor_add: dtype mismatch: f32 and f64"
 *      "tensor_add: device mismatch: cpu and cuda"
 *  - works on f32 tensors on the CPU or CUDA (both inputs on one device);
 *    reshape, slice, split, cat, to and detach take any dtype (copied as
 *    bytes; only an f32 result records a backward node),
 *  - takes a NULL input (a failed op's result passed on) as an error,
 *    "tensor_add: input is NULL", never a crash,
 *  - records a backward node when autograd is enabled and any input requires
 *    grad (see autograd.h), saving inputs through tensor_snapshot.
 * Inputs are borrowed, never consumed. Broadcasting follows NumPy rules. */
#ifndef TRIB_TENSOR_OPS_H
#define TRIB_TENSOR_OPS_H

#include <stdint.h>

#include "tensor/tensor.h"

/* [M,K] x [K,N] -> [M,N] (OpenBLAS / cuBLAS sgemm) */
struct tensor *tensor_matmul(struct tensor *a, struct tensor *b);
/* x [B,in], w [out,in], b [out] or NULL -> x w^T + b (torch.nn.functional.linear) */
struct tensor *tensor_linear(struct tensor *x, struct tensor *w, struct tensor *b);

struct tensor *tensor_add(struct tensor *a, struct tensor *b);
struct tensor *tensor_sub(struct tensor *a, struct tensor *b);
struct tensor *tensor_mul(struct tensor *a, struct tensor *b);
struct tensor *tensor_div(struct tensor *a, struct tensor *b);
struct tensor *tensor_minimum(struct tensor *a, struct tensor *b);  /* torch.min(a,b) */
struct tensor *tensor_maximum(struct tensor *a, struct tensor *b);
struct tensor *tensor_add_scalar(struct tensor *x, float s);
struct tensor *tensor_mul_scalar(struct tensor *x, float s);

struct tensor *tensor_neg(struct tensor *x);
struct tensor *tensor_relu(struct tensor *x);
struct tensor *tensor_tanh(struct tensor *x);
struct tensor *tensor_exp(struct tensor *x);
struct tensor *tensor_log(struct tensor *x);
struct tensor *tensor_square(struct tensor *x);
struct tensor *tensor_sqrt(struct tensor *x);
struct tensor *tensor_clamp(struct tensor *x, float lo, float hi);

/* along the last dim */
struct tensor *tensor_softmax(struct tensor *x);
struct tensor *tensor_log_softmax(struct tensor *x);
/* x [R,C] (or [C]), index int64 [R,K] (or [K]) -> [R,K]: x[r, index[r,k]].
 * Out-of-range indices are an error naming the index and C. */
struct tensor *tensor_gather(struct tensor *x, struct tensor *index);

struct tensor *tensor_sum(struct tensor *x);    /* all elements -> scalar */
struct tensor *tensor_mean(struct tensor *x);
/* over one dim (negative counts from the end) */
struct tensor *tensor_sum_dim(struct tensor *x, int dim, bool keepdim);
struct tensor *tensor_mean_dim(struct tensor *x, int dim, bool keepdim);

/* same data, new shape (numel must match) */
struct tensor *tensor_reshape(struct tensor *x, int ndim, const int64_t *shape);
/* rows [start, end) of dim 0, copied, in x's dtype (any dtype; only an f32
 * slice records a backward node) */
struct tensor *tensor_slice(struct tensor *x, int64_t start, int64_t end);
/* splits dim `dim` into n pieces of sizes[i] (must sum to the dim); writes
 * n new references into out, in x's dtype (any dtype; only f32 pieces
 * record a backward node). Returns 0 or -1. */
int tensor_split(struct tensor *x, int dim, int n, const int64_t *sizes, struct tensor **out);
/* joins n tensors of one dtype (any) and device along dim `dim`; a dtype
 * other than xs[0]'s is refused: "tensor_cat: dtype mismatch: input 0 is
 * f32 but input 2 is i64". Only an f32 result records a backward node. */
struct tensor *tensor_cat(int n, struct tensor **xs, int dim);

/* Inverted dropout: with training, zeroes each element with probability p
 * and scales the rest by 1/(1-p); the mask comes from one seed drawn from
 * *rng. Without training, returns a new reference to the same values. */
struct tensor *tensor_dropout(struct tensor *x, float p, bool training, uint64_t *rng);

/* mean((a-b)^2) */
struct tensor *tensor_mse(struct tensor *a, struct tensor *b);

/* torch.nn.functional.cross_entropy(logits, target) with mean reduction:
 * logits [R,C], target int64 [R] of class indices in [0,C) -> the scalar
 * mean over rows of -log_softmax(logits)[r, target[r]]. Errors: a target
 * out of range (naming it and C), shapes that do not match, R = 0. */
struct tensor *tensor_cross_entropy(struct tensor *logits, struct tensor *target);

/* torch.nn.functional.embedding_bag with 1-D input and offsets: weight
 * [N,D], indices int64 [L] (each in [0,N)), offsets int64 [B] (offsets[0]
 * = 0, non-decreasing, at most L): bag b is indices[offsets[b] ..
 * offsets[b+1]) (the last bag ends at L); output [B,D] row b = the sum
 * (TENSOR_BAG_SUM) or mean (TENSOR_BAG_MEAN) of the weight rows of bag b,
 * zeros for an empty bag. Differentiable in weight; indices and offsets on
 * weight's device. */
enum tensor_bag_mode { TENSOR_BAG_SUM, TENSOR_BAG_MEAN };
struct tensor *tensor_embedding_bag(struct tensor *weight, struct tensor *indices, struct tensor *offsets,
                                    enum tensor_bag_mode mode);

/* Moves to a device, recorded: the gradient moves back. */
struct tensor *tensor_to(struct tensor *x, enum device dev);
/* A new tensor with the same data and no graph (requires_grad false). */
struct tensor *tensor_detach(struct tensor *x);

/* ---- distributions (sampling is not differentiable) -------------------- */

/* logits [R,C] (or [C]) -> int64 [R] (or scalar) actions, on logits' device. */
struct tensor *tensor_categorical_sample(struct tensor *logits, uint64_t *rng);
/* mean [R,D], log_std [D] or [R,D] -> mean + exp(log_std) * N(0,1) (no grad) */
struct tensor *tensor_gaussian_sample(struct tensor *mean, struct tensor *log_std, uint64_t *rng);
/* diagonal Gaussian log-density of x, summed over the last dim -> [R] */
struct tensor *tensor_gaussian_log_prob(struct tensor *mean, struct tensor *log_std, struct tensor *x);
/* entropy summed over the last dim -> [R] (or scalar for log_std [D]) */
struct tensor *tensor_gaussian_entropy(struct tensor *log_std);

#endif
