/* Local optimizers composed of backend.h kernels, so one code path runs on
 * every device. Each update follows torch.optim's single-tensor formulas in
 * the same order; element-wise kernels are called with out == an input of
 * the same shape (in place), which every backend's element-wise loop allows. */
#include "optim/optim.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomic_file.h"
#include "common/check.h"
#include "common/error.h"
#include "common/hash.h"
#include "tensor/backend.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "optim state format assumes a little-endian host"
#endif

/* ---- errors ------------------------------------------------------------ */

TRIB_ERROR_MODULE(optim)

/* ---- kinds and defaults ------------------------------------------------- */

const char *optim_kind_name(enum optim_kind kind)
{
    static const char *names[OPTIM_KIND_COUNT] = {"sgd", "adam", "adamw", "rmsprop"};
    return (unsigned)kind < OPTIM_KIND_COUNT ? names[kind] : "?";
}

struct optim_hyper optim_defaults(enum optim_kind kind)
{
    struct optim_hyper h = {0};
    switch (kind) {
    case OPTIM_SGD: h.lr = 1e-3; break;
    case OPTIM_ADAM: h.lr = 1e-3; h.beta1 = 0.9; h.beta2 = 0.999; h.eps = 1e-8; break;
    case OPTIM_ADAMW:
        h.lr = 1e-3; h.beta1 = 0.9; h.beta2 = 0.999; h.eps = 1e-8; h.weight_decay = 1e-2;
        break;
    case OPTIM_RMSPROP: h.lr = 1e-2; h.alpha = 0.99; h.eps = 1e-8; break;
    default: break;
    }
    return h;
}

/* ---- the optimizer ------------------------------------------------------ */

#define MAX_BUFS 3

struct optim {
    enum optim_kind kind;
    struct optim_hyper h;
    int n;
    struct tensor **params;       /* retained */
    enum device dev;
    const struct tensor_backend *be;
    int nbufs;                    /* state buffers per param */
    int64_t *steps;               /* per param */
    float **bufs;                 /* n * nbufs device buffers of numel floats */
    float *s1, *s2, *s3;          /* scratch, max numel each */
};

/* Buffer roles per kind (index into a param's nbufs):
 *   SGD:     0 momentum_buffer (if momentum != 0)
 *   Adam(W): 0 exp_avg, 1 exp_avg_sq, 2 max_exp_avg_sq (amsgrad)
 *   RMSprop: 0 square_avg, then momentum_buffer (momentum > 0), then
 *            grad_avg (centered) */
static int bufs_for(enum optim_kind kind, const struct optim_hyper *h)
{
    switch (kind) {
    case OPTIM_SGD: return h->momentum != 0 ? 1 : 0;
    case OPTIM_ADAM:
    case OPTIM_ADAMW: return h->amsgrad ? 3 : 2;
    case OPTIM_RMSPROP: return 1 + (h->momentum > 0) + (h->centered ? 1 : 0);
    default: return 0;
    }
}

static int check_hyper(enum optim_kind kind, const struct optim_hyper *h)
{
    if (!(h->lr >= 0)) return optim_set_error("optim_new: invalid learning rate %g (must be >= 0)", h->lr);
    if (!(h->weight_decay >= 0))
        return optim_set_error("optim_new: invalid weight_decay %g (must be >= 0)", h->weight_decay);
    switch (kind) {
    case OPTIM_SGD:
        if (!(h->momentum >= 0)) return optim_set_error("optim_new: invalid momentum %g (must be >= 0)", h->momentum);
        if (h->nesterov && (h->momentum <= 0 || h->dampening != 0))
            return optim_set_error("optim_new: nesterov momentum requires a momentum and zero dampening");
        break;
    case OPTIM_ADAM:
    case OPTIM_ADAMW:
        if (!(h->eps >= 0)) return optim_set_error("optim_new: invalid eps %g (must be >= 0)", h->eps);
        if (!(h->beta1 >= 0 && h->beta1 < 1))
            return optim_set_error("optim_new: invalid beta1 %g (must be in [0, 1))", h->beta1);
        if (!(h->beta2 >= 0 && h->beta2 < 1))
            return optim_set_error("optim_new: invalid beta2 %g (must be in [0, 1))", h->beta2);
        break;
    case OPTIM_RMSPROP:
        if (!(h->eps >= 0)) return optim_set_error("optim_new: invalid eps %g (must be >= 0)", h->eps);
        if (!(h->momentum >= 0)) return optim_set_error("optim_new: invalid momentum %g (must be >= 0)", h->momentum);
        if (!(h->alpha >= 0)) return optim_set_error("optim_new: invalid alpha %g (must be >= 0)", h->alpha);
        break;
    default: return optim_set_error("optim_new: invalid optimizer kind %d", (int)kind);
    }
    return 0;
}

struct optim *optim_new(enum optim_kind kind, const struct optim_hyper *hyper,
                        int n, struct tensor **params)
{
    if ((unsigned)kind >= OPTIM_KIND_COUNT) return optim_set_error("optim_new: invalid optimizer kind %d", (int)kind), NULL;
    if (!hyper) return optim_set_error("optim_new: hyper is NULL"), NULL;
    if (n < 1 || !params) return optim_set_error("optim_new: need at least one parameter (n = %d)", n), NULL;
    if (check_hyper(kind, hyper) < 0) return NULL;
    int64_t max_numel = 0;
    for (int i = 0; i < n; i++) {
        struct tensor *p = params[i];
        if (!p) return optim_set_error("optim_new: params[%d] is NULL", i), NULL;
        if (p->dtype != DTYPE_F32)
            return optim_set_error("optim_new: params[%d] is %s, expected f32", i, dtype_name(p->dtype)), NULL;
        if (p->device != params[0]->device)
            return optim_set_error("optim_new: params[%d] is on %s but params[0] is on %s", i,
                        device_name(p->device), device_name(params[0]->device)), NULL;
        for (int j = 0; j < i; j++)
            if (params[j] == p) return optim_set_error("optim_new: params[%d] is the same tensor as params[%d]", i, j), NULL;
        if (p->numel > max_numel) max_numel = p->numel;
    }
    const struct tensor_backend *be = tensor_backend_for(params[0]->device);
    if (!be || !be->available())
        return optim_set_error("optim_new: no %s device is available", device_name(params[0]->device)), NULL;

    struct optim *o = trib_xcalloc(1, sizeof *o);
    o->kind = kind;
    o->h = *hyper;
    o->n = n;
    o->dev = params[0]->device;
    o->be = be;
    o->nbufs = bufs_for(kind, hyper);
    o->params = trib_xcalloc((size_t)n, sizeof *o->params);
    o->steps = trib_xcalloc((size_t)n, sizeof *o->steps);
    o->bufs = trib_xcalloc((size_t)n * (size_t)(o->nbufs ? o->nbufs : 1), sizeof *o->bufs);
    for (int i = 0; i < n; i++) {
        o->params[i] = tensor_retain(params[i]);
        size_t nb = (size_t)params[i]->numel * sizeof(float);
        for (int b = 0; b < o->nbufs; b++) {
            float *p = be->alloc(nb);
            CHECK_ALLOC(p);
            be->zero(p, nb);
            o->bufs[i * o->nbufs + b] = p;
        }
    }
    size_t sb = (size_t)max_numel * sizeof(float);
    o->s1 = be->alloc(sb);
    o->s2 = be->alloc(sb);
    o->s3 = be->alloc(sb);
    CHECK_ALLOC(o->s1);
    CHECK_ALLOC(o->s2);
    CHECK_ALLOC(o->s3);
    trib_error_clear(&optim_error_text);
    return o;
}

void optim_free(struct optim *o)
{
    if (!o) return;
    for (int i = 0; i < o->n * o->nbufs; i++) o->be->free(o->bufs[i]);
    for (int i = 0; i < o->n; i++) tensor_free(o->params[i]);
    o->be->free(o->s1);
    o->be->free(o->s2);
    o->be->free(o->s3);
    free(o->bufs);
    free(o->steps);
    free(o->params);
    free(o);
}

void optim_set_lr(struct optim *o, double lr) { o->h.lr = lr; }
double optim_get_lr(const struct optim *o) { return o->h.lr; }
struct optim_hyper optim_get_hyper(const struct optim *o) { return o->h; }

int64_t optim_param_steps(const struct optim *o, int i)
{
    CHECK(i >= 0 && i < o->n);
    return o->steps[i];
}

/* ---- kernel composition ------------------------------------------------- */

/* Element-wise vector ops of length n on the optimizer's device. */
struct vec {
    const struct tensor_backend *be;
    size_t n;
    struct kbcast bc;   /* flat n elements, no broadcast */
};

static struct vec vec_of(const struct tensor_backend *be, size_t n)
{
    struct vec v = {.be = be, .n = n,
                    .bc = {.n = {1, 1, 1, (int64_t)n}, .sa = {0, 0, 0, 1}, .sb = {0, 0, 0, 1}}};
    return v;
}

static void v_un(const struct vec *v, enum kunary op, float *out, const float *x, float a)
{
    v->be->unary(op, out, x, v->n, a, 0.0f);
}

static void v_bin(const struct vec *v, enum kbinary op, float *out, const float *a, const float *b)
{
    v->be->binary(op, out, a, b, &v->bc);
}

/* out = x + alpha * y via tmp (torch's add(x, y, alpha=...)). */
static void v_add_scaled(const struct vec *v, float *out, const float *x, const float *y, float alpha, float *tmp)
{
    v_un(v, KU_SCALE, tmp, y, alpha);
    v_bin(v, KB_ADD, out, x, tmp);
}

/* m = m * decay + (1 - decay) * x  (mul_(decay).add_(x, alpha=1-decay)) */
static void v_ema(const struct vec *v, float *m, const float *x, double decay, float *tmp)
{
    v_un(v, KU_SCALE, m, m, (float)decay);
    v_add_scaled(v, m, m, x, (float)(1 - decay), tmp);
}

/* acc = acc * decay + w * x * x  (mul_(decay).addcmul_(x, x, value=w)) */
static void v_decay_addsq(const struct vec *v, float *acc, const float *x, float decay, float w, float *tmp)
{
    v_bin(v, KB_MUL, tmp, x, x);
    v_un(v, KU_SCALE, tmp, tmp, w);
    v_un(v, KU_SCALE, acc, acc, decay);
    v_bin(v, KB_ADD, acc, acc, tmp);
}

/* The gradient with L2 weight decay folded in: g or s1 = g + wd * p. */
static const float *with_weight_decay(struct optim *o, const struct vec *v, const float *g, const float *p)
{
    if (o->h.weight_decay == 0) return g;
    v_add_scaled(v, o->s1, g, p, (float)o->h.weight_decay, o->s2);
    return o->s1;
}

static void step_sgd(struct optim *o, int i, float *p, const float *g)
{
    const struct optim_hyper *h = &o->h;
    struct vec v = vec_of(o->be, (size_t)o->params[i]->numel);
    const float *d = with_weight_decay(o, &v, g, p);
    if (h->momentum != 0) {
        float *buf = o->bufs[i * o->nbufs];
        if (o->steps[i] == 1)
            o->be->copy(buf, d, v.n * sizeof(float));
        else {
            v_un(&v, KU_SCALE, buf, buf, (float)h->momentum);
            v_add_scaled(&v, buf, buf, d, (float)(1 - h->dampening), o->s2);
        }
        if (h->nesterov) {
            v_add_scaled(&v, o->s3, d, buf, (float)h->momentum, o->s2);
            d = o->s3;
        } else {
            d = buf;
        }
    }
    v_add_scaled(&v, p, p, d, (float)-h->lr, o->s2);
}

static void step_adam(struct optim *o, int i, float *p, const float *g)
{
    const struct optim_hyper *h = &o->h;
    struct vec v = vec_of(o->be, (size_t)o->params[i]->numel);
    float **b = &o->bufs[i * o->nbufs];
    const float *gg = g;
    if (o->kind == OPTIM_ADAMW) {
        if (h->weight_decay != 0) v_un(&v, KU_SCALE, p, p, (float)(1 - h->lr * h->weight_decay));
    } else {
        gg = with_weight_decay(o, &v, g, p);
    }
    v_ema(&v, b[0], gg, h->beta1, o->s2);
    v_decay_addsq(&v, b[1], gg, (float)h->beta2, (float)(1 - h->beta2), o->s2);
    double step = (double)o->steps[i];
    double bc1 = 1 - pow(h->beta1, step);
    double bc2 = 1 - pow(h->beta2, step);
    double step_size = h->lr / bc1;
    double bc2_sqrt = sqrt(bc2);
    const float *second = b[1];
    if (h->amsgrad) {
        v_bin(&v, KB_MAX, b[2], b[2], b[1]);
        second = b[2];
    }
    /* denom = sqrt(v) / sqrt(bc2) + eps */
    v_un(&v, KU_SQRT, o->s2, second, 0);
    v_un(&v, KU_SCALE, o->s2, o->s2, (float)(1 / bc2_sqrt));
    v_un(&v, KU_ADD_SCALAR, o->s2, o->s2, (float)h->eps);
    v_bin(&v, KB_DIV, o->s2, b[0], o->s2);
    v_add_scaled(&v, p, p, o->s2, (float)-step_size, o->s3);
}

static void step_rmsprop(struct optim *o, int i, float *p, const float *g)
{
    const struct optim_hyper *h = &o->h;
    struct vec v = vec_of(o->be, (size_t)o->params[i]->numel);
    float **b = &o->bufs[i * o->nbufs];
    float *square_avg = b[0];
    float *momentum_buf = h->momentum > 0 ? b[1] : NULL;
    float *grad_avg = h->centered ? b[h->momentum > 0 ? 2 : 1] : NULL;
    const float *gg = with_weight_decay(o, &v, g, p);
    v_decay_addsq(&v, square_avg, gg, (float)h->alpha, (float)(1 - h->alpha), o->s2);
    if (grad_avg) {
        v_ema(&v, grad_avg, gg, h->alpha, o->s2);
        v_bin(&v, KB_MUL, o->s2, grad_avg, grad_avg);
        v_bin(&v, KB_SUB, o->s2, square_avg, o->s2);
        v_un(&v, KU_SQRT, o->s2, o->s2, 0);
    } else {
        v_un(&v, KU_SQRT, o->s2, square_avg, 0);
    }
    v_un(&v, KU_ADD_SCALAR, o->s2, o->s2, (float)h->eps);   /* avg */
    v_bin(&v, KB_DIV, o->s3, gg, o->s2);                     /* grad / avg */
    if (momentum_buf) {
        v_un(&v, KU_SCALE, momentum_buf, momentum_buf, (float)h->momentum);
        v_bin(&v, KB_ADD, momentum_buf, momentum_buf, o->s3);
        v_add_scaled(&v, p, p, momentum_buf, (float)-h->lr, o->s2);
    } else {
        v_add_scaled(&v, p, p, o->s3, (float)-h->lr, o->s2);
    }
}

int optim_step(struct optim *o, struct tensor **grads)
{
    if (!grads) return optim_set_error("optim_step: grads is NULL");
    char s1[64], s2[64];
    for (int i = 0; i < o->n; i++) {
        const struct tensor *g = grads[i], *p = o->params[i];
        if (!g) continue;
        if (g->dtype != DTYPE_F32)
            return optim_set_error("optim_step: grads[%d] is %s, expected f32", i, dtype_name(g->dtype));
        if (g->device != o->dev)
            return optim_set_error("optim_step: grads[%d] is on %s but the params are on %s", i,
                        device_name(g->device), device_name(o->dev));
        if (!tensor_same_shape(g, p))
            return optim_set_error("optim_step: grads[%d] has shape %s but params[%d] has shape %s", i,
                        shape_str(g->ndim, g->shape, s1, sizeof s1), i,
                        shape_str(p->ndim, p->shape, s2, sizeof s2));
    }
    for (int i = 0; i < o->n; i++) {
        if (!grads[i]) continue;
        o->steps[i]++;
        if (o->params[i]->numel == 0) continue;
        /* A staged write: forwards running on other threads meanwhile
         * (async training) snapshot the old values, never a half update. */
        struct tensor_write w;
        float *p = tensor_write_begin(o->params[i], &w);
        const float *g = tensor_f32(grads[i]);
        switch (o->kind) {
        case OPTIM_SGD: step_sgd(o, i, p, g); break;
        case OPTIM_ADAM:
        case OPTIM_ADAMW: step_adam(o, i, p, g); break;
        case OPTIM_RMSPROP: step_rmsprop(o, i, p, g); break;
        default: CHECK(!"invalid optimizer kind");
        }
        tensor_write_end(o->params[i], &w);
    }
    return 0;
}

/* ---- clipping and schedules --------------------------------------------- */

int optim_clip_grad_norm(int n, struct tensor **grads, double max_norm, double *total_norm)
{
    if (!(max_norm >= 0)) return optim_set_error("optim_clip_grad_norm: invalid max_norm %g (must be >= 0)", max_norm);
    if (n < 0 || (n > 0 && !grads)) return optim_set_error("optim_clip_grad_norm: invalid gradient list (n = %d)", n);
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        if (grads[i]->dtype != DTYPE_F32)
            return optim_set_error("optim_clip_grad_norm: grads[%d] is %s, expected f32", i, dtype_name(grads[i]->dtype));
        if (first < 0) first = i;
        else if (grads[i]->device != grads[first]->device)
            return optim_set_error("optim_clip_grad_norm: grads[%d] is on %s but grads[%d] is on %s", i,
                        device_name(grads[i]->device), first, device_name(grads[first]->device));
    }
    if (first < 0) {
        if (total_norm) *total_norm = 0;
        return 0;
    }
    const struct tensor_backend *be = tensor_backend_for(grads[first]->device);
    /* |g|^2 of each grad as a 1 x K by K x 1 product (a dot on cuBLAS/BLAS). */
    float *dev_sq = be->alloc((size_t)n * sizeof(float));
    CHECK_ALLOC(dev_sq);
    be->zero(dev_sq, (size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) {
        if (!grads[i] || grads[i]->numel == 0) continue;
        const float *g = tensor_f32(grads[i]);
        int64_t k = grads[i]->numel;
        be->sgemm(0, 0, 1, 1, k, 1.0f, g, k, g, 1, 0.0f, dev_sq + i, 1);
    }
    float *sq = trib_xmalloc((size_t)n * sizeof(float));
    be->copy_to_host(sq, dev_sq, (size_t)n * sizeof(float));
    be->free(dev_sq);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += sq[i];   /* NULL grads left 0 */
    free(sq);
    double total = sqrt(sum);
    /* torch: clip_coef = max_norm / (total + 1e-6), clamped to 1, applied always */
    float coef = (float)(max_norm / (total + 1e-6));
    if (coef > 1.0f) coef = 1.0f;
    for (int i = 0; i < n; i++) {
        if (!grads[i] || grads[i]->numel == 0) continue;
        float *g = tensor_mutable_data(grads[i]);
        be->unary(KU_SCALE, g, g, (size_t)grads[i]->numel, coef, 0.0f);
    }
    if (total_norm) *total_norm = total;
    return 0;
}

double optim_lr_linear(double base_lr, double start_factor, double end_factor,
                       int64_t total_iters, int64_t step)
{
    if (total_iters <= 0) return base_lr * end_factor;
    if (step < 0) step = 0;
    if (step > total_iters) step = total_iters;
    return base_lr * (start_factor + (end_factor - start_factor) * (double)step / (double)total_iters);
}

/* ---- state persistence -------------------------------------------------- */

#define STATE_MAGIC "TRIBOPTM"
#define HEADER_BYTES 96
#define PARAM_HEADER_BYTES 16
#define TRAILER_BYTES 8

enum { FLAG_NESTEROV = 1, FLAG_AMSGRAD = 2, FLAG_CENTERED = 4 };


static void put32(uint8_t **w, uint32_t x) { memcpy(*w, &x, 4); *w += 4; }
static void put64(uint8_t **w, uint64_t x) { memcpy(*w, &x, 8); *w += 8; }
static void putf64(uint8_t **w, double x) { memcpy(*w, &x, 8); *w += 8; }
static uint32_t get32(const uint8_t **r) { uint32_t x; memcpy(&x, *r, 4); *r += 4; return x; }
static uint64_t get64(const uint8_t **r) { uint64_t x; memcpy(&x, *r, 8); *r += 8; return x; }
static double getf64(const uint8_t **r) { double x; memcpy(&x, *r, 8); *r += 8; return x; }

static uint32_t flags_of(const struct optim_hyper *h)
{
    return (h->nesterov ? FLAG_NESTEROV : 0) | (h->amsgrad ? FLAG_AMSGRAD : 0) | (h->centered ? FLAG_CENTERED : 0);
}

static size_t state_bytes(const struct optim *o)
{
    size_t total = HEADER_BYTES + TRAILER_BYTES;
    for (int i = 0; i < o->n; i++)
        total += PARAM_HEADER_BYTES + (size_t)o->nbufs * (size_t)o->params[i]->numel * sizeof(float);
    return total;
}

int optim_save(const struct optim *o, uint8_t **out, size_t *len)
{
    size_t total = state_bytes(o);
    uint8_t *buf = trib_xmalloc(total), *w = buf;
    memcpy(w, STATE_MAGIC, 8);
    w += 8;
    put32(&w, OPTIM_STATE_VERSION);
    put32(&w, (uint32_t)o->kind);
    put32(&w, (uint32_t)o->n);
    put32(&w, (uint32_t)o->nbufs);
    const double hv[8] = {o->h.lr, o->h.momentum, o->h.dampening, o->h.weight_decay,
                          o->h.beta1, o->h.beta2, o->h.eps, o->h.alpha};
    for (int k = 0; k < 8; k++) putf64(&w, hv[k]);
    put32(&w, flags_of(&o->h));
    put32(&w, 0);
    CHECK(w - buf == HEADER_BYTES);
    for (int i = 0; i < o->n; i++) {
        int64_t numel = o->params[i]->numel;
        put64(&w, (uint64_t)numel);
        put64(&w, (uint64_t)o->steps[i]);
        size_t nb = (size_t)numel * sizeof(float);
        for (int b = 0; b < o->nbufs; b++) {
            if (nb) o->be->copy_to_host(w, o->bufs[i * o->nbufs + b], nb);
            w += nb;
        }
    }
    put64(&w, trib_fnv1a64(buf, (size_t)(w - buf)));
    CHECK((size_t)(w - buf) == total);
    *out = buf;
    *len = total;
    return 0;
}

int optim_load(struct optim *o, const uint8_t *buf, size_t len)
{
    if (!buf) return optim_set_error("optim_load: buffer is NULL");
    if (len < HEADER_BYTES + TRAILER_BYTES)
        return optim_set_error("optim_load: state is truncated (%zu bytes, the header alone is %d)", len,
                    HEADER_BYTES + TRAILER_BYTES);
    if (memcmp(buf, STATE_MAGIC, 8) != 0) return optim_set_error("optim_load: bad magic: not an optimizer state");
    const uint8_t *r = buf + 8;
    uint32_t version = get32(&r), kind = get32(&r), n = get32(&r), nbufs = get32(&r);
    if (version != OPTIM_STATE_VERSION)
        return optim_set_error("optim_load: unsupported state format version %u (expected %d)", version, OPTIM_STATE_VERSION);
    if (kind != (uint32_t)o->kind)
        return optim_set_error("optim_load: state is for %s but this optimizer is %s",
                    optim_kind_name((enum optim_kind)(kind < OPTIM_KIND_COUNT ? kind : OPTIM_KIND_COUNT)),
                    optim_kind_name(o->kind));
    if (n != (uint32_t)o->n)
        return optim_set_error("optim_load: state has %u parameters but this optimizer has %d", n, o->n);
    double hv[8];
    for (int k = 0; k < 8; k++) hv[k] = getf64(&r);
    uint32_t flags = get32(&r);
    (void)get32(&r);
    static const char *names[8] = {"lr", "momentum", "dampening", "weight_decay", "beta1", "beta2", "eps", "alpha"};
    const double mine[8] = {o->h.lr, o->h.momentum, o->h.dampening, o->h.weight_decay,
                            o->h.beta1, o->h.beta2, o->h.eps, o->h.alpha};
    for (int k = 1; k < 8; k++)
        if (hv[k] != mine[k] && !(isnan(hv[k]) && isnan(mine[k])))
            return optim_set_error("optim_load: hyper-parameter %s is %g in the state but %g in this optimizer",
                        names[k], hv[k], mine[k]);
    if (flags != flags_of(&o->h))
        return optim_set_error("optim_load: flags (nesterov/amsgrad/centered) are %u in the state but %u in this optimizer",
                    flags, flags_of(&o->h));
    if (nbufs != (uint32_t)o->nbufs)
        return optim_set_error("optim_load: state has %u buffers per parameter but this optimizer has %d", nbufs, o->nbufs);
    size_t expect = state_bytes(o);
    /* Walk the param headers that are present before trusting the length, so
     * a numel mismatch is reported as such rather than as a size problem. */
    const uint8_t *q = buf + HEADER_BYTES;
    for (int i = 0; i < o->n; i++) {
        if ((size_t)(q - buf) + PARAM_HEADER_BYTES > len) break;
        int64_t numel = (int64_t)get64(&q);
        if (numel != o->params[i]->numel)
            return optim_set_error("optim_load: parameter %d has %lld elements in the state but %lld here", i,
                        (long long)numel, (long long)o->params[i]->numel);
        q += 8 + (size_t)o->nbufs * (size_t)numel * sizeof(float);
    }
    if (len < expect) return optim_set_error("optim_load: state is truncated (%zu bytes, expected %zu)", len, expect);
    if (len > expect) return optim_set_error("optim_load: %zu trailing bytes after the state", len - expect);
    const uint8_t *t = buf + len - TRAILER_BYTES;
    if (get64(&t) != trib_fnv1a64(buf, len - TRAILER_BYTES))
        return optim_set_error("optim_load: checksum mismatch: the state is corrupt");
    if (!(hv[0] >= 0)) return optim_set_error("optim_load: invalid learning rate %g in the state (must be >= 0)", hv[0]);
    r = buf + HEADER_BYTES;
    for (int i = 0; i < o->n; i++) {
        uint64_t numel = get64(&r);
        int64_t st = (int64_t)get64(&r);
        if (st < 0) return optim_set_error("optim_load: parameter %d has a negative step count %lld", i, (long long)st);
        if (st == INT64_MAX)
            return optim_set_error("optim_load: parameter %d has a step count %lld with no step left", i, (long long)st);
        r += (size_t)o->nbufs * numel * sizeof(float);
    }
    r = buf + HEADER_BYTES;
    for (int i = 0; i < o->n; i++) {
        size_t nb = (size_t)get64(&r) * sizeof(float);
        o->steps[i] = (int64_t)get64(&r);
        for (int b = 0; b < o->nbufs; b++) {
            if (nb) o->be->copy_from_host(o->bufs[i * o->nbufs + b], r, nb);
            r += nb;
        }
    }
    o->h.lr = hv[0];
    return 0;
}

int optim_save_file(const struct optim *o, const char *path)
{
    uint8_t *buf;
    size_t len;
    optim_save(o, &buf, &len);
    int rc = atomic_file_replace(path, buf, len, "optim_save_file");
    free(buf);
    return rc == 0 ? 0 : optim_set_error("%s", atomic_file_last_error());
}

int optim_load_file(struct optim *o, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return optim_set_error("optim_load_file: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = trib_xmalloc(cap);
    for (;;) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        cap *= 2;
        buf = trib_xrealloc(buf, cap);
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return optim_set_error("optim_load_file: cannot read %s", path);
    }
    int rc = optim_load(o, buf, len);
    free(buf);
    if (rc < 0) return optim_set_error("%s (file %s)", optim_last_error(), path);
    return 0;
}
