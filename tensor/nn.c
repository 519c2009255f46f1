/* nn modules (nn.h): Linear, MLP and an RL policy (categorical or Gaussian
 * head, optional value head), built from ops.h with PyTorch's default
 * initialisation drawn from the caller's RNG state. */
#include "tensor/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

#define NN_MAX_LAYERS 8
#define RNG_STEP 0x9E3779B97F4A7C15ull   /* rng_next's increment */

/* One linear layer: indices of its weight and bias (-1: none) in params[]. */
struct layer { int w, b; };

struct nn_impl {
    struct nn_module m;                 /* first: nn_module * <-> nn_impl * */
    const char *who;                    /* "nn_linear", ... for messages */
    int n_trunk;                        /* layers with activation after all but (mlp) the last */
    struct layer trunk[NN_MAX_LAYERS];
    enum nn_activation act;
    float dropout;
    bool mlp;                           /* no activation after the last trunk layer */
    /* policy only */
    bool policy;
    int in_dim;
    struct nn_policy_config cfg;
    struct layer head, value;
    int log_std;
    bool failed;                        /* a parameter could not be allocated */
    enum tensor_bag_mode bag_mode;      /* embedding_bag only */
};

/* ---- init ------------------------------------------------------------------------ */

static void fill_uniform(struct tensor *t, float bound, uint64_t *rng)
{
    float *p = tensor_f32(t);
    for (int64_t i = 0; i < t->numel; i++) {
        float u = (float)(rng_next(rng) >> 40) * (1.0f / 16777216.0f);
        p[i] = bound * (2.0f * u - 1.0f);
    }
}

static int add_param(struct nn_impl *m, struct tensor *t)
{
    tensor_set_requires_grad(t, true);
    m->m.params = trib_xrealloc(m->m.params, (size_t)(m->m.n_params + 1) * sizeof *m->m.params);
    m->m.params[m->m.n_params] = t;
    return m->m.n_params++;
}

/* PyTorch's Linear init: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
/* Sizes can come from the network (RemoteModule), so a parameter too large
 * to allocate marks the module failed (the constructor then returns NULL)
 * rather than aborting. */
static struct layer add_linear(struct nn_impl *m, int in, int out, bool bias, uint64_t *rng)
{
    struct layer l = {-1, -1};
    if (m->failed) return l;
    float bound = in > 0 ? 1.0f / sqrtf((float)in) : 0.0f;
    struct tensor *w = tensor_try_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){out, in}, false);
    struct tensor *b = bias && w ? tensor_try_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){out}, false) : NULL;
    if (!w || (bias && !b)) {
        tensor_free(w);
        tensor_free(b);
        m->failed = true;
        return l;
    }
    fill_uniform(w, bound, rng);
    l.w = add_param(m, w);
    if (b) {
        fill_uniform(b, bound, rng);
        l.b = add_param(m, b);
    }
    return l;
}

/* The constructors' common end: the module, or NULL with an error naming
 * the constructor if a parameter could not be allocated. */
static struct nn_module *impl_finish(struct nn_impl *m, const char *who)
{
    if (!m->failed) return &m->m;
    char why[256];
    snprintf(why, sizeof why, "%s", tensor_last_error());
    nn_module_free(&m->m);
    return tensor_error("%s: cannot allocate the parameters: %s", who, why);
}

/* ---- forward ----------------------------------------------------------------------- */

static struct tensor *apply_linear(struct nn_impl *m, struct layer l, struct tensor *x)
{
    return tensor_linear(x, m->m.params[l.w], l.b >= 0 ? m->m.params[l.b] : NULL);
}

/* Re-labels the current error with the module's name. */
static int module_fail(struct nn_impl *m)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tensor_last_error());
    tensor_error("%s: %s", m->who, msg);
    return -1;
}

/* Runs the trunk on x (borrowed); returns a new reference or NULL. */
static struct tensor *run_trunk(struct nn_impl *m, struct tensor *x)
{
    struct tensor *h = tensor_retain(x);
    for (int i = 0; i < m->n_trunk && h; i++) {
        struct tensor *y = apply_linear(m, m->trunk[i], h);
        tensor_free(h);
        h = y;
        if (!h || (m->mlp && i == m->n_trunk - 1)) break;
        y = m->act == NN_RELU ? tensor_relu(h) : tensor_tanh(h);
        tensor_free(h);
        h = y;
        if (h && m->dropout > 0.0f) {
            /* one splitmix step of the module's state, taken atomically so
             * concurrent forwards draw distinct masks */
            uint64_t state = __atomic_add_fetch(&m->m.rng, RNG_STEP, __ATOMIC_RELAXED) - RNG_STEP;
            y = tensor_dropout(h, m->dropout, m->m.training, &state);
            tensor_free(h);
            h = y;
        }
    }
    return h;
}

static int check_inputs(struct nn_impl *m, int n_in, struct tensor **in, int dim)
{
    if (n_in != 1) {
        tensor_error("%s: expected 1 input, got %d", m->who, n_in);
        return -1;
    }
    struct tensor *x = in[0];
    if (!x) {
        tensor_error("%s: input is NULL", m->who);
        return -1;
    }
    if (x->ndim < 1 || x->shape[x->ndim - 1] != dim) {
        char s[96];
        tensor_error("%s: expected input [...,%d], got %s", m->who, dim, shape_str(x->ndim, x->shape, s, sizeof s));
        return -1;
    }
    return 0;
}

static int seq_forward(struct nn_module *mod, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    struct nn_impl *m = (struct nn_impl *)mod;
    *n_out = 0;
    if (check_inputs(m, n_in, in, m->in_dim) < 0) return -1;
    struct tensor *y = run_trunk(m, in[0]);
    if (!y) return module_fail(m);
    out[0] = y;
    *n_out = 1;
    return 0;
}

static int policy_forward(struct nn_module *mod, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    struct nn_impl *m = (struct nn_impl *)mod;
    *n_out = 0;
    if (check_inputs(m, n_in, in, m->in_dim) < 0) return -1;
    struct tensor *h = run_trunk(m, in[0]);
    if (!h) return module_fail(m);
    int k = 0;
    out[k] = apply_linear(m, m->head, h);
    if (!out[k++]) goto fail;
    if (m->cfg.head == NN_HEAD_GAUSSIAN) out[k++] = tensor_retain(m->m.params[m->log_std]);
    if (m->cfg.value_head) {
        struct tensor *v = apply_linear(m, m->value, h);
        if (!v) goto fail;
        out[k] = tensor_reshape(v, v->ndim - 1, v->shape);
        tensor_free(v);
        if (!out[k++]) goto fail;
    }
    tensor_free(h);
    *n_out = k;
    return 0;
fail:
    for (int i = 0; i < k; i++) tensor_free(out[i]);
    tensor_free(h);
    return module_fail(m);
}

static void impl_free(struct nn_module *mod)
{
    for (int i = 0; i < mod->n_params; i++) tensor_free(mod->params[i]);
    free(mod->params);
    free(mod);
}

static const struct nn_module_ops linear_ops = {"linear", seq_forward, impl_free};
static const struct nn_module_ops mlp_ops = {"mlp", seq_forward, impl_free};
static const struct nn_module_ops policy_ops = {"policy", policy_forward, impl_free};

/* forward(indices, offsets) -> [B,D] */
static int bag_forward(struct nn_module *mod, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    struct nn_impl *m = (struct nn_impl *)mod;
    *n_out = 0;
    if (n_in != 2) {
        tensor_error("nn_embedding_bag: expected 2 inputs (indices, offsets), got %d", n_in);
        return -1;
    }
    struct tensor *y = tensor_embedding_bag(mod->params[0], in[0], in[1], m->bag_mode);
    if (!y) return module_fail(m);
    out[0] = y;
    *n_out = 1;
    return 0;
}

static const struct nn_module_ops bag_ops = {"embedding_bag", bag_forward, impl_free};

static struct nn_impl *impl_new(const struct nn_module_ops *ops, const char *who, uint64_t *rng)
{
    struct nn_impl *m = trib_xcalloc(1, sizeof *m);
    m->m.ops = ops;
    m->m.training = true;
    m->m.rng = rng_next(rng);
    m->who = who;
    return m;
}

/* LAPACK's QR (OpenBLAS exports it; tensor/CMakeLists.txt checks that at
 * configure time): the Fortran entry points, 32-bit integers as Debian's
 * libopenblas has them. */
void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work, const int *lwork,
             int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda, const double *tau, double *work,
             const int *lwork, int *info);

/* A standard normal by Box-Muller from the caller's RNG (as the embedding
 * table's init). */
static double normal_draw(uint64_t *rng)
{
    double u1 = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.28318530717958647692 * u2);
}

/* torch.nn.init.orthogonal_'s algorithm: A (max x min of the weight's
 * shape) Gaussian, A = QR, Q's columns times sign(diag R), transposed back
 * when the weight is wide, times gain. */
int nn_init_orthogonal(struct tensor *w, float gain, uint64_t *rng)
{
    const char *who = "nn_init_orthogonal";
    if (!w || !rng) return tensor_set_error("%s: %s is NULL", who, !w ? "the weight" : "rng");
    if (w->ndim != 2 || w->dtype != DTYPE_F32 || w->device != DEVICE_CPU || w->shape[0] < 1 || w->shape[1] < 1)
        return tensor_set_error("%s: the weight must be a CPU f32 [out,in] matrix", who);
    if (w->shape[0] > INT32_MAX || w->shape[1] > INT32_MAX)
        return tensor_set_error("%s: a %lld x %lld weight is too large for LAPACK", who, (long long)w->shape[0],
                            (long long)w->shape[1]);
    int rows = (int)w->shape[0], cols = (int)w->shape[1];
    int m = rows > cols ? rows : cols, n = rows > cols ? cols : rows, info = 0, query = -1;
    double *a = malloc((size_t)m * (size_t)n * sizeof *a), *tau = malloc((size_t)n * sizeof *tau), wq = 0;
    if (!a || !tau) {
        free(a);
        free(tau);
        return tensor_set_error("%s: out of memory for a %d x %d matrix", who, m, n);
    }
    for (size_t i = 0; i < (size_t)m * (size_t)n; i++) a[i] = normal_draw(rng);   /* column-major m x n */
    dgeqrf_(&m, &n, a, &m, tau, &wq, &query, &info);
    int lwork = info == 0 && wq >= n ? (int)wq : n;
    double *work = malloc((size_t)lwork * sizeof *work);
    if (work && info == 0) dgeqrf_(&m, &n, a, &m, tau, work, &lwork, &info);
    double *sign = work && info == 0 ? malloc((size_t)n * sizeof *sign) : NULL;
    for (int j = 0; sign && j < n; j++) sign[j] = a[(size_t)j * (size_t)m + (size_t)j] > 0 ? 1.0
                                                  : a[(size_t)j * (size_t)m + (size_t)j] < 0 ? -1.0 : 0.0;
    if (sign) dorgqr_(&m, &n, &n, a, &m, tau, work, &lwork, &info);
    if (sign && info == 0) {
        float *p = tensor_f32(w);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                /* Q is m x n column-major; W = Q (tall) or Q^T (wide) */
                size_t qi = rows >= cols ? (size_t)c * (size_t)m + (size_t)r : (size_t)r * (size_t)m + (size_t)c;
                int col = rows >= cols ? c : r;
                p[(size_t)r * (size_t)cols + (size_t)c] = (float)(a[qi] * sign[col] * (double)gain);
            }
    }
    int ok = sign && info == 0;
    const char *why = !work || (info == 0 && !sign) ? "out of memory" : "dgeqrf/dorgqr";
    free(a);
    free(tau);
    free(work);
    free(sign);
    if (!ok) return tensor_set_error("%s: LAPACK's QR of a %d x %d matrix failed (%s, info %d)", who, m, n, why, info);
    return 0;
}

static int init_layer(struct nn_impl *m, struct layer l, float gain, uint64_t *rng)
{
    if (l.w < 0) return 0;
    if (nn_init_orthogonal(m->m.params[l.w], gain, rng) != 0) return -1;
    if (l.b >= 0) memset(tensor_f32(m->m.params[l.b]), 0, (size_t)m->m.params[l.b]->numel * sizeof(float));
    return 0;
}

int nn_module_init_orthogonal(struct nn_module *mod, float hidden_gain, float out_gain, uint64_t *rng)
{
    const char *who = "nn_module_init_orthogonal";
    if (!mod || !rng) return tensor_set_error("%s: %s is NULL", who, !mod ? "module" : "rng");
    if (mod->ops != &linear_ops && mod->ops != &mlp_ops && mod->ops != &policy_ops)
        return tensor_set_error("%s: a %s module has no linear layers", who, mod->ops->kind);
    struct nn_impl *m = (struct nn_impl *)mod;
    for (int i = 0; i < m->m.n_params; i++)
        if (m->m.params[i]->device != DEVICE_CPU) return tensor_set_error("%s: the parameters must be on the CPU", who);
    for (int i = 0; i < m->n_trunk; i++) {
        bool out = m->mlp && i == m->n_trunk - 1;   /* an mlp's last layer is its output */
        if (init_layer(m, m->trunk[i], out ? out_gain : hidden_gain, rng) != 0) return -1;
    }
    if (m->policy && init_layer(m, m->head, out_gain, rng) != 0) return -1;
    if (m->policy && m->cfg.value_head && init_layer(m, m->value, 1.0f, rng) != 0) return -1;
    return 0;
}

/* ---- public ------------------------------------------------------------------------ */

int nn_forward(struct nn_module *m, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    const char *who = "nn_forward";
    const char *null = !m ? "module" : !n_out ? "n_out" : !out ? "out" : n_in > 0 && !in ? "in" : NULL;
    if (null) {
        tensor_error("%s: %s is NULL", who, null);
        return -1;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            *n_out = 0;
            tensor_error("%s: input %d is NULL", who, i);
            return -1;
        }
    return m->ops->forward(m, n_in, in, n_out, out);
}

struct tensor *nn_forward1(struct nn_module *m, struct tensor *x)
{
    if (!m) return tensor_error("nn_forward1: module is NULL");
    if (!x) return tensor_error("nn_forward1: input is NULL");
    struct tensor *out[NN_MAX_IO];
    int n = 0;
    if (nn_forward(m, 1, &x, &n, out) < 0) return NULL;
    for (int i = 1; i < n; i++) tensor_free(out[i]);
    return out[0];
}

void nn_module_free(struct nn_module *m)
{
    if (m) m->ops->free(m);
}

int nn_module_to(struct nn_module *m, enum device dev)
{
    if (!m) {
        tensor_error("nn_module_to: module is NULL");
        return -1;
    }
    if (!usable_backend(dev, "nn_module_to")) return -1;
    for (int i = 0; i < m->n_params; i++) {
        struct tensor *p = m->params[i];
        if (p->device == dev) continue;
        struct tensor *snap = tensor_snapshot(p);
        struct tensor *q = tensor_clone_to(snap, dev);
        tensor_free(snap);
        if (!q) return -1;
        tensor_set_requires_grad(q, true);
        tensor_free(p);
        m->params[i] = q;
    }
    return 0;
}

struct nn_module *nn_linear_new(int in, int out, bool bias, uint64_t *rng)
{
    if (!rng) return tensor_error("nn_linear_new: rng is NULL");
    if (in < 1 || out < 1) return tensor_error("nn_linear_new: sizes must be positive, got %d -> %d", in, out);
    struct nn_impl *m = impl_new(&linear_ops, "nn_linear", rng);
    m->in_dim = in;
    m->mlp = true;
    m->n_trunk = 1;
    m->trunk[0] = add_linear(m, in, out, bias, rng);
    return impl_finish(m, "nn_linear_new");
}

struct nn_module *nn_mlp_new(int n, const int *sizes, enum nn_activation act, float dropout, uint64_t *rng)
{
    if (n < 2 || n > NN_MAX_LAYERS + 1)
        return tensor_error("nn_mlp_new: need 2..%d sizes, got %d", NN_MAX_LAYERS + 1, n);
    if (!sizes) return tensor_error("nn_mlp_new: sizes is NULL");
    if (!rng) return tensor_error("nn_mlp_new: rng is NULL");
    for (int i = 0; i < n; i++)
        if (sizes[i] < 1) return tensor_error("nn_mlp_new: size %d at %d must be positive", sizes[i], i);
    if (!(dropout >= 0.0f && dropout < 1.0f)) return tensor_error("nn_mlp_new: dropout %g is outside [0,1)", (double)dropout);
    struct nn_impl *m = impl_new(&mlp_ops, "nn_mlp", rng);
    m->in_dim = sizes[0];
    m->mlp = true;
    m->act = act;
    m->dropout = dropout;
    m->n_trunk = n - 1;
    for (int i = 0; i < n - 1; i++) m->trunk[i] = add_linear(m, sizes[i], sizes[i + 1], true, rng);
    return impl_finish(m, "nn_mlp_new");
}

struct nn_module *nn_embedding_bag_new(int num, int dim, enum tensor_bag_mode mode, uint64_t *rng)
{
    const char *who = "nn_embedding_bag_new";
    if (!rng) return tensor_error("%s: rng is NULL", who);
    if (num < 1 || dim < 1) return tensor_error("%s: sizes must be positive, got %d x %d", who, num, dim);
    if (mode != TENSOR_BAG_SUM && mode != TENSOR_BAG_MEAN) return tensor_error("%s: unknown mode %d", who, (int)mode);
    struct nn_impl *m = impl_new(&bag_ops, "nn_embedding_bag", rng);
    m->bag_mode = mode;
    struct tensor *w = tensor_try_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){num, dim}, false);
    if (!w) {
        m->failed = true;
        return impl_finish(m, who);
    }
    /* PyTorch's init: N(0,1), by Box-Muller from the caller's RNG */
    float *p = tensor_f32(w);
    for (int64_t i = 0; i < w->numel; i++) {
        float u1 = (float)(rng_next(rng) >> 40) * (1.0f / 16777216.0f);
        float u2 = (float)(rng_next(rng) >> 40) * (1.0f / 16777216.0f);
        p[i] = sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958647692f * u2);
    }
    add_param(m, w);
    return impl_finish(m, who);
}

struct nn_module *nn_policy_new(const struct nn_policy_config *cfg, uint64_t *rng)
{
    const char *who = "nn_policy_new";
    if (!cfg) return tensor_error("%s: cfg is NULL", who);
    if (!rng) return tensor_error("%s: rng is NULL", who);
    if (cfg->obs_dim < 1 || cfg->act_dim < 1)
        return tensor_error("%s: obs_dim and act_dim must be positive, got %d and %d", who, cfg->obs_dim, cfg->act_dim);
    if (cfg->n_hidden < 0 || cfg->n_hidden > 4) return tensor_error("%s: n_hidden %d is outside 0..4", who, cfg->n_hidden);
    for (int i = 0; i < cfg->n_hidden; i++)
        if (cfg->hidden[i] < 1) return tensor_error("%s: hidden[%d] = %d must be positive", who, i, cfg->hidden[i]);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return tensor_error("%s: dropout %g is outside [0,1)", who, (double)cfg->dropout);
    if (cfg->head != NN_HEAD_CATEGORICAL && cfg->head != NN_HEAD_GAUSSIAN)
        return tensor_error("%s: unknown head %d", who, (int)cfg->head);
    struct nn_impl *m = impl_new(&policy_ops, "nn_policy", rng);
    m->policy = true;
    m->cfg = *cfg;
    m->in_dim = cfg->obs_dim;
    m->act = cfg->act;
    m->dropout = cfg->dropout;
    m->n_trunk = cfg->n_hidden;
    int prev = cfg->obs_dim;
    for (int i = 0; i < cfg->n_hidden; i++) {
        m->trunk[i] = add_linear(m, prev, cfg->hidden[i], true, rng);
        prev = cfg->hidden[i];
    }
    m->head = add_linear(m, prev, cfg->act_dim, true, rng);
    if (cfg->head == NN_HEAD_GAUSSIAN && !m->failed) {
        struct tensor *ls = tensor_try_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){cfg->act_dim}, false);
        if (ls) {
            for (int i = 0; i < cfg->act_dim; i++) tensor_f32(ls)[i] = cfg->init_log_std;
            m->log_std = add_param(m, ls);
        } else {
            m->failed = true;
        }
    }
    if (cfg->value_head) m->value = add_linear(m, prev, 1, true, rng);
    return impl_finish(m, who);
}
