/* Local optimizers (docs/design.md §5): SGD, Adam, AdamW and RMSprop over arrays
 * of parameter and gradient tensors, with explicit state, global-norm
 * gradient clipping, a linear LR schedule and a versioned state format.
 * Update formulas and hyper-parameters are PyTorch's (torch.optim). */
#ifndef TRIB_OPTIM_OPTIM_H
#define TRIB_OPTIM_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

enum optim_kind { OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW, OPTIM_RMSPROP, OPTIM_KIND_COUNT };

/* Hyper-parameters (start from optim_defaults); a kind ignores the fields it
 * does not list:
 *   SGD:     lr, momentum, dampening, nesterov, weight_decay
 *   Adam:    lr, beta1, beta2, eps, weight_decay (L2, added to the gradient), amsgrad
 *   AdamW:   lr, beta1, beta2, eps, weight_decay (decoupled: p *= 1 - lr*wd), amsgrad
 *   RMSprop: lr, alpha, eps, momentum, centered, weight_decay */
struct optim_hyper {
    double lr;
    double momentum;
    double dampening;
    bool nesterov;
    double weight_decay;
    double beta1, beta2;
    double eps;
    bool amsgrad;
    double alpha;
    bool centered;
};

/* PyTorch's defaults for a kind: SGD lr 1e-3; Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8; AdamW the same with weight_decay 1e-2; RMSprop
 * lr 1e-2, alpha 0.99, eps 1e-8. Everything else 0/false. */
struct optim_hyper optim_defaults(enum optim_kind kind);

/* "sgd", "adam", "adamw", "rmsprop"; "?" for an invalid kind. */
const char *optim_kind_name(enum optim_kind kind);

struct optim;

/* Message of the last failed optim_* call on this thread ("" if none). */
const char *optim_last_error(void);
/* Sets it (printf-style) and returns -1 (common/error.h's one helper). */
int optim_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* An optimizer over n f32 parameter tensors, all on one device. Retains
 * each param (the optimizer holds a reference until optim_free). Allocates
 * its state (moments, zeroed) and scratch buffers once, here, on the
 * params' device. Returns NULL with optim_last_error() set for an invalid
 * kind, n < 1, a NULL/non-f32 param, a param listed twice, params on
 * different devices, or a hyper-parameter PyTorch rejects (negative lr,
 * eps, momentum, weight decay or alpha, betas outside [0,1), nesterov
 * without momentum or with dampening). Any thread. */
struct optim *optim_new(enum optim_kind kind, const struct optim_hyper *hyper,
                        int n, struct tensor **params);
/* Releases the state and the param references. Accepts NULL. */
void optim_free(struct optim *opt);

/* One update of every param i whose grads[i] is non-NULL (a NULL gradient
 * skips that param and leaves its state alone, like a None .grad in
 * PyTorch). grads[i] must be f32, on the params' device, with params[i]'s
 * shape; otherwise returns -1 with an error naming the index and shapes and
 * changes nothing. Each param is updated as a staged write
 * (tensor_write_begin/end): the new values go to a fresh storage that is
 * published at once, so graphs recorded before the step, and forwards that
 * snapshot the param while the step runs on another thread, see the old
 * values, never a mix. Composed of backend kernels: runs on the params'
 * device; the one allocation per param is the staged copy. Grads are only
 * read. Threads: one step at a time per optimizer (callers serialise steps,
 * optim_set_lr, optim_load); nothing else may write the params meanwhile. */
int optim_step(struct optim *opt, struct tensor **grads);

/* The learning rate used by the next step; set it from a schedule. */
void optim_set_lr(struct optim *opt, double lr);
double optim_get_lr(const struct optim *opt);
/* The hyper-parameters (lr included) as they are now. */
struct optim_hyper optim_get_hyper(const struct optim *opt);
/* Steps taken by param i (params with NULL grads skip steps). */
int64_t optim_param_steps(const struct optim *opt, int i);

/* Global-norm gradient clipping with torch.nn.utils.clip_grad_norm_
 * semantics (norm_type 2): total = sqrt(sum_i |g_i|^2) over the non-NULL
 * grads; every grad is multiplied in place (tensor_mutable_data) by
 * min(1, max_norm / (total + 1e-6)). Writes the total norm (before
 * clipping) to *total_norm if non-NULL. Grads must be f32 on one device.
 * Returns 0, or -1 (nothing changed) for max_norm < 0 or NaN, mixed
 * devices or dtypes. Allocates one n-float device buffer per call. */
int optim_clip_grad_norm(int n, struct tensor **grads, double max_norm, double *total_norm);

/* Linear schedule, closed form of torch.optim.lr_scheduler.LinearLR: the lr
 * at scheduler step `step` (0 before the first optimizer step) is
 *   base_lr * (start + (end - start) * min(step, total_iters) / total_iters).
 * start_factor 1, end_factor final_lr/base_lr gives linear decay to final_lr
 * over total_iters steps. total_iters <= 0 returns base_lr * end_factor. */
double optim_lr_linear(double base_lr, double start_factor, double end_factor,
                       int64_t total_iters, int64_t step);

/* ---- state persistence --------------------------------------------------
 * Format (little-endian), version OPTIM_STATE_VERSION:
 *   "TRIBOPTM" | u32 version | u32 kind | u32 n_params | u32 bufs_per_param
 *   | f64 lr, momentum, dampening, weight_decay, beta1, beta2, eps, alpha
 *   | u32 flags (1 nesterov, 2 amsgrad, 4 centered) | u32 0
 *   | per param: i64 numel, i64 steps, bufs_per_param * numel f32
 *   | u64 FNV-1a 64 checksum of everything before it. */
#define OPTIM_STATE_VERSION 1

/* Serialises step counts, moments and the current lr into a new malloc'ed
 * buffer (*out, caller frees; *len its size). Returns 0 (copies device
 * state to the host: blocks until the device is done). */
int optim_save(const struct optim *opt, uint8_t **out, size_t *len);
/* Restores a state saved by an optimizer of the same kind, hyper-parameters
 * (lr excepted: it is restored) and param numels. Returns -1 with a message
 * naming the problem (truncated, bad magic, version, kind, count, hyper-
 * parameter, numel, checksum, trailing bytes, a negative step count or
 * learning rate), leaving the optimizer as it was. */
int optim_load(struct optim *opt, const uint8_t *buf, size_t len);
/* The same through a file: written all or nothing (common/atomic_file.h:
 * on a failure the old file is untouched; "optim_save_file: <path>:
 * <strerror>"); errors name the path. */
int optim_save_file(const struct optim *opt, const char *path);
int optim_load_file(struct optim *opt, const char *path);

#endif
