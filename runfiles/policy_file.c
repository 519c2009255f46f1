/* The policy's architecture, its nets and its .safetensors form
 * (policy_file.h). */
#include "runfiles/policy_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "envs/env.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "tensor/ops.h"

#define FORMAT "tributary-policy-1"

/* Weights and biases of an MLP in -> hidden... -> out. */
static int64_t mlp_params(int in, int n_hidden, const int *hidden, int out)
{
    int64_t n = 0, prev = in;
    for (int i = 0; i < n_hidden; i++) {
        n += (prev + 1) * hidden[i];
        prev = hidden[i];
    }
    return n + (prev + 1) * out;
}

int64_t policy_arch_param_count(const struct policy_arch *a)
{
    int64_t n = mlp_params(a->obs_dim, a->n_hidden, a->hidden, a->act_dim) + (a->gaussian ? a->act_dim : 0);
    if (a->value_head) n += mlp_params(a->obs_dim, a->n_hidden, a->hidden, 1);
    return n;
}

int policy_arch_check(const struct policy_arch *a, const char *what, uint64_t have_bytes)
{
    if (a->n_hidden < 1 || a->n_hidden > POLICY_MAX_HIDDEN || a->obs_dim < 1 || a->obs_dim > POLICY_MAX_DIM ||
        a->act_dim < 1 || a->act_dim > POLICY_MAX_DIM)
        return runfiles_set_error("%s: architecture sizes out of range", what);
    for (int i = 0; i < a->n_hidden; i++)
        if (a->hidden[i] < 1 || a->hidden[i] > POLICY_MAX_DIM)
            return runfiles_set_error("%s: hidden size %d outside 1..%d", what, a->hidden[i], POLICY_MAX_DIM);
    int64_t n = policy_arch_param_count(a);
    if ((uint64_t)n * sizeof(float) > have_bytes)
        return runfiles_set_error("%s: the architecture has %lld parameters (%llu bytes), the file holds %llu bytes "
                                  "of them", what, (long long)n, (unsigned long long)n * sizeof(float),
                                  (unsigned long long)have_bytes);
    if (n > POLICY_MAX_PARAMS)
        return runfiles_set_error("%s: the architecture has %lld parameters (at most %lld)", what, (long long)n,
                                  (long long)POLICY_MAX_PARAMS);
    return 0;
}

int policy_arch_build(const struct policy_arch *a, uint64_t seed, struct nn_module **actor,
                      struct nn_module **critic)
{
    *actor = NULL;
    if (critic) *critic = NULL;
    uint64_t init_rng = seed;
    int sizes[POLICY_MAX_HIDDEN + 2];
    sizes[0] = a->obs_dim;
    for (int i = 0; i < a->n_hidden; i++) sizes[i + 1] = a->hidden[i];
    if (!a->gaussian) {
        /* PyTorch's RL example: Linear, ReLU/tanh, dropout, ..., Linear to the logits */
        sizes[a->n_hidden + 1] = a->act_dim;
        *actor = nn_mlp_new(a->n_hidden + 2, sizes, a->tanh ? NN_TANH : NN_RELU, (float)a->dropout, &init_rng);
    } else {
        struct nn_policy_config pc = { .obs_dim = a->obs_dim, .act_dim = a->act_dim, .n_hidden = a->n_hidden,
                                       .act = a->tanh ? NN_TANH : NN_RELU, .dropout = (float)a->dropout,
                                       .head = NN_HEAD_GAUSSIAN, .init_log_std = (float)a->init_log_std };
        for (int i = 0; i < a->n_hidden; i++) pc.hidden[i] = a->hidden[i];
        *actor = nn_policy_new(&pc, &init_rng);
    }
    if (!*actor) return -1;
    if (a->orthogonal && nn_module_init_orthogonal(*actor, 1.41421356f, 0.01f, &init_rng) != 0) {
        nn_module_free(*actor);
        *actor = NULL;
        return -1;
    }
    (*actor)->training = a->dropout > 0;
    (*actor)->rng = env_rng_seed(seed, 1000);
    if (a->value_head && critic) {
        sizes[a->n_hidden + 1] = 1;
        *critic = nn_mlp_new(a->n_hidden + 2, sizes, a->tanh ? NN_TANH : NN_RELU, 0.0f, &init_rng);
        if (*critic && a->orthogonal && nn_module_init_orthogonal(*critic, 1.41421356f, 1.0f, &init_rng) != 0) {
            nn_module_free(*critic);
            *critic = NULL;
        }
        if (!*critic) {
            nn_module_free(*actor);
            *actor = NULL;
            return -1;
        }
        (*critic)->training = false;
    }
    return 0;
}

int policy_arch_param_names(const struct policy_arch *a, int cap, char (*names)[64])
{
    int n = 0, step = 2 + (a->dropout > 0);   /* Linear, activation[, Dropout] */
    for (int l = 0; l <= a->n_hidden && n + 2 <= cap; l++) {
        snprintf(names[n++], 64, "actor.%d.weight", l * step);
        snprintf(names[n++], 64, "actor.%d.bias", l * step);
    }
    if (a->gaussian && n < cap) snprintf(names[n++], 64, "actor_logstd");
    for (int l = 0; a->value_head && l <= a->n_hidden && n + 2 <= cap; l++) {
        snprintf(names[n++], 64, "critic.%d.weight", l * 2);
        snprintf(names[n++], 64, "critic.%d.bias", l * 2);
    }
    return n;
}

void policy_norm_apply(const struct policy_norm *n, float *obs, int rows)
{
    if (!n || n->dim == 0) return;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n->dim; i++) {
            float *x = &obs[(size_t)r * (size_t)n->dim + (size_t)i];
            double z = ((double)*x - n->mean[i]) / sqrt(n->var[i] + n->eps);
            *x = (float)(z < -n->clip ? -n->clip : z > n->clip ? n->clip : z);   /* NaN stays NaN */
        }
}

void policy_extras_free(struct policy_extras *x)
{
    if (!x) return;
    free((double *)x->act.low);
    free((double *)x->act.high);
    free(x->norm.mean);
    free(x->norm.var);
    memset(x, 0, sizeof *x);
}

/* x as printed: NaN without its sign ("nan", never "-nan"), as rl/finite.c
 * prints the parameters it refuses. */
static double shown(double x) { return isnan(x) ? fabs(x) : x; }

/* The statistics' numbers as the reader accepts them (`what` names the
 * file in messages): dim the policy's, count, means and variances finite,
 * count and variances >= 0, within the bounds (POLICY_NORM_COUNT_MAX,
 * POLICY_NORM_MOMENT_MAX), clip and eps positive and finite. */
static int norm_check(const struct policy_norm *n, int obs_dim, const char *what)
{
    if (n->dim != obs_dim)
        return runfiles_set_error("%s: the statistics have %d dims, the policy takes %d observations", what, n->dim,
                                  obs_dim);
    if (!(isfinite(n->count) && n->count >= 0))
        return runfiles_set_error("%s: obs_norm.count is %g (a count is finite and >= 0)", what, shown(n->count));
    if (n->count > POLICY_NORM_COUNT_MAX)
        return runfiles_set_error("%s: obs_norm.count is %g, more than 2^53", what, n->count);
    for (int i = 0; i < n->dim; i++) {
        if (!isfinite(n->mean[i]))
            return runfiles_set_error("%s: obs_norm.mean[%d] is %g", what, i, shown(n->mean[i]));
        if (!(isfinite(n->var[i]) && n->var[i] >= 0))
            return runfiles_set_error("%s: obs_norm.var[%d] is %g (a variance is finite and >= 0)", what, i,
                                      shown(n->var[i]));
        if (!(n->mean[i] * n->mean[i] + n->var[i] <= POLICY_NORM_MOMENT_MAX))
            return runfiles_set_error("%s: obs_norm.mean[%d] %g and var[%d] %g: mean^2 + var is more than %g", what, i,
                                      n->mean[i], i, n->var[i], POLICY_NORM_MOMENT_MAX);
    }
    if (!(isfinite(n->clip) && n->clip > 0))
        return runfiles_set_error("%s: obs_clip is %g, not a positive number", what, shown(n->clip));
    if (!(isfinite(n->eps) && n->eps > 0))
        return runfiles_set_error("%s: obs_eps is %g, not a positive number", what, shown(n->eps));
    return 0;
}

/* A box's bounds as the reader accepts them: as many as the Gaussian's
 * action dims, none NaN, low <= high. */
static int act_check(const struct env_space *s, const struct policy_arch *a, const char *what)
{
    if ((s->kind == SPACE_BOX) != a->gaussian)
        return runfiles_set_error("%s: a %s action space does not fit the %s head", what,
                                  s->kind == SPACE_BOX ? "box" : "discrete", a->gaussian ? "gaussian" : "categorical");
    int dim = s->kind == SPACE_BOX ? s->dim : s->n;
    if (dim != a->act_dim)
        return runfiles_set_error("%s: the action space has %d %s, the policy %d", what, dim,
                                  s->kind == SPACE_BOX ? "dims" : "actions", a->act_dim);
    for (int i = 0; s->kind == SPACE_BOX && i < s->dim; i++)
        if (isnan(s->low[i]) || isnan(s->high[i]) || s->low[i] > s->high[i])
            return runfiles_set_error("%s: action bounds [%g, %g] at dim %d (NaN, or low > high)", what,
                                      shown(s->low[i]), shown(s->high[i]), i);
    return 0;
}

/* n doubles as "%.17g" joined by commas (free it). */
static char *join_doubles(const double *x, int n)
{
    size_t cap = (size_t)n * 26 + 1, k = 0;
    char *s = trib_xmalloc(cap);
    s[0] = '\0';
    for (int i = 0; i < n; i++) k += (size_t)snprintf(s + k, cap - k, "%s%.17g", i ? "," : "", x[i]);
    return s;
}

/* The text of the metadata's numbers (a box's bounds allocated: free
 * low and high). */
struct meta_text {
    char hidden[64], od[16], ad[16], dr[32], ls[32], clip[32], eps[32];
    char *low, *high;
};

/* The metadata of a policy file into m: the architecture and env (in the
 * order files have always had them), then the action space, the
 * statistics' clip and eps, and info's own; their text in t. Returns the
 * number of entries. */
static int build_meta(const struct policy_arch *a, const struct policy_info *info, struct meta_text *t,
                      struct safetensors_meta *m)
{
    size_t k = 0;
    t->hidden[0] = '\0';
    for (int i = 0; i < a->n_hidden && k < sizeof t->hidden; i++)
        k += (size_t)snprintf(t->hidden + k, sizeof t->hidden - k, "%s%d", i ? "," : "", a->hidden[i]);
    snprintf(t->od, sizeof t->od, "%d", a->obs_dim);
    snprintf(t->ad, sizeof t->ad, "%d", a->act_dim);
    snprintf(t->dr, sizeof t->dr, "%.17g", a->dropout);
    snprintf(t->ls, sizeof t->ls, "%.17g", a->init_log_std);
    int n = 0;
    m[n++] = (struct safetensors_meta){ "format", FORMAT };
    m[n++] = (struct safetensors_meta){ "env", info->env_id };
    m[n++] = (struct safetensors_meta){ "obs_dim", t->od };
    m[n++] = (struct safetensors_meta){ "act_dim", t->ad };
    m[n++] = (struct safetensors_meta){ "head", a->gaussian ? "gaussian" : "categorical" };
    m[n++] = (struct safetensors_meta){ "value_head", a->value_head ? "true" : "false" };
    m[n++] = (struct safetensors_meta){ "hidden", t->hidden };
    m[n++] = (struct safetensors_meta){ "activation", a->tanh ? "tanh" : "relu" };
    m[n++] = (struct safetensors_meta){ "dropout", t->dr };
    m[n++] = (struct safetensors_meta){ "init_log_std", t->ls };
    if (info->env_plugin) m[n++] = (struct safetensors_meta){ "env_plugin", info->env_plugin };
    if (info->env_args && info->env_args[0]) m[n++] = (struct safetensors_meta){ "env_args", info->env_args };
    const struct env_space *s = info->act;
    if (s) m[n++] = (struct safetensors_meta){ "act_kind", s->kind == SPACE_BOX ? "box" : "discrete" };
    if (s && s->kind == SPACE_BOX) {
        m[n++] = (struct safetensors_meta){ "act_low", t->low = join_doubles(s->low, s->dim) };
        m[n++] = (struct safetensors_meta){ "act_high", t->high = join_doubles(s->high, s->dim) };
    }
    if (info->norm && info->norm->dim > 0) {
        snprintf(t->clip, sizeof t->clip, "%.17g", info->norm->clip);
        snprintf(t->eps, sizeof t->eps, "%.17g", info->norm->eps);
        m[n++] = (struct safetensors_meta){ "obs_clip", t->clip };
        m[n++] = (struct safetensors_meta){ "obs_eps", t->eps };
    }
    for (int i = 0; i < info->n_meta; i++) m[n++] = info->meta[i];
    return n;
}

/* The statistics as three F64 tensors after the parameters (entries e[n..],
 * tensors own[0..2]); the number of entries added. */
static int norm_tensors(const struct policy_norm *nm, struct safetensors_entry *e, struct tensor **own)
{
    if (!nm || nm->dim == 0) return 0;
    int64_t d = nm->dim;
    own[0] = tensor_new(DTYPE_F64, DEVICE_CPU, 1, &d);
    own[1] = tensor_new(DTYPE_F64, DEVICE_CPU, 1, &d);
    own[2] = tensor_new(DTYPE_F64, DEVICE_CPU, 0, NULL);
    CHECK(own[0] && own[1] && own[2]);
    memcpy(tensor_data(own[0]), nm->mean, (size_t)d * sizeof(double));
    memcpy(tensor_data(own[1]), nm->var, (size_t)d * sizeof(double));
    *(double *)tensor_data(own[2]) = nm->count;
    e[0] = (struct safetensors_entry){ "obs_norm.mean", own[0] };
    e[1] = (struct safetensors_entry){ "obs_norm.var", own[1] };
    e[2] = (struct safetensors_entry){ "obs_norm.count", own[2] };
    return 3;
}

int policy_file_write(const char *path, const struct policy_arch *a, const struct policy_info *info, int n,
                      struct tensor *const *params)
{
    char names[POLICY_MAX_TENSORS][64], what[600];
    int want = policy_arch_param_names(a, POLICY_MAX_TENSORS, names);
    if (n != want) return runfiles_set_error("policy %s: %d parameters, the architecture has %d", path, n, want);
    snprintf(what, sizeof what, "policy %s", path);
    if ((info->act && act_check(info->act, a, what) != 0) ||
        (info->norm && info->norm->dim > 0 && norm_check(info->norm, a->obs_dim, what) != 0))
        return -1;
    if (info->n_meta < 0 || info->n_meta > 64) return runfiles_set_error("%s: %d more metadata entries", what, info->n_meta);
    struct safetensors_entry e[POLICY_MAX_TENSORS + 3];
    struct tensor *snap[POLICY_MAX_TENSORS], *own[3] = { 0 };
    for (int i = 0; i < n; i++) {
        snap[i] = tensor_snapshot(params[i]);
        e[i] = (struct safetensors_entry){ names[i], snap[i] };
    }
    int ne = n + norm_tensors(info->norm, e + n, own);
    struct meta_text t = { 0 };
    struct safetensors_meta m[16 + 64];
    int nm = build_meta(a, info, &t, m);
    int rc = safetensors_save(path, e, ne, m, nm);
    for (int i = 0; i < n; i++) tensor_free(snap[i]);
    for (int i = 0; i < 3; i++) tensor_free(own[i]);
    free(t.low);
    free(t.high);
    return rc;
}

int policy_file_save(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin, int n,
                     struct tensor *const *params)
{
    struct policy_info info = { .env_id = env_id, .env_plugin = env_plugin };
    return policy_file_write(path, a, &info, n, params);
}

static int meta_int(const struct safetensors *st, const char *key, int lo, int hi, int *out)
{
    const char *v = safetensors_meta_get(st, key);
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi)
        return runfiles_set_error("policy %s: metadata '%s' missing or not in %d..%d", st->path, key, lo, hi);
    *out = (int)x;
    return 0;
}

/* The hidden sizes of the metadata ("64,64") into a. */
static int meta_hidden(const char *path, const char *hid, struct policy_arch *a)
{
    for (const char *p = hid; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > POLICY_MAX_DIM || a->n_hidden == POLICY_MAX_HIDDEN || (*end && *end != ','))
            return runfiles_set_error("policy %s: bad hidden sizes '%s'", path, hid);
        a->hidden[a->n_hidden++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (a->n_hidden == 0) return runfiles_set_error("policy %s: no hidden sizes", path);
    return 0;
}

/* The architecture the metadata of st records, into a (zeroed first), and
 * the env it names into env. */
static int read_arch(const struct safetensors *st, const char *path, struct policy_arch *a, char *env, size_t cap)
{
    const char *fmt = safetensors_meta_get(st, "format"), *head = safetensors_meta_get(st, "head"),
               *act = safetensors_meta_get(st, "activation"), *hid = safetensors_meta_get(st, "hidden"),
               *vh = safetensors_meta_get(st, "value_head"), *e = safetensors_meta_get(st, "env"),
               *dr = safetensors_meta_get(st, "dropout");
    memset(a, 0, sizeof *a);
    if (!fmt || strcmp(fmt, FORMAT) != 0)
        return runfiles_set_error("policy %s: not a tributary policy (metadata format is not '" FORMAT "')", path);
    if (meta_int(st, "obs_dim", 1, POLICY_MAX_DIM, &a->obs_dim) ||
        meta_int(st, "act_dim", 1, POLICY_MAX_DIM, &a->act_dim))
        return -1;
    if (!head || !act || !hid || !vh || !e || !dr || (strcmp(head, "gaussian") && strcmp(head, "categorical")) ||
        (strcmp(act, "tanh") && strcmp(act, "relu")))
        return runfiles_set_error("policy %s: metadata head/activation/hidden/value_head/env/dropout missing or "
                                  "unknown", path);
    a->gaussian = strcmp(head, "gaussian") == 0;
    a->tanh = strcmp(act, "tanh") == 0;
    a->value_head = strcmp(vh, "true") == 0;
    char *dr_end = NULL;
    a->dropout = strtod(dr, &dr_end);
    if (dr_end == dr || *dr_end || !(a->dropout >= 0 && a->dropout < 1))
        return runfiles_set_error("policy %s: bad dropout '%s'", path, dr);
    if (meta_hidden(path, hid, a) != 0) return -1;
    /* what the metadata describes must fit in the file before it is built */
    uint64_t have = 0;
    for (int i = 0; i < st->n; i++) have += tensor_nbytes(st->tensors[i]);
    char what[600];
    snprintf(what, sizeof what, "policy %s", path);
    if (policy_arch_check(a, what, have) != 0) return -1;
    const char *plugin = safetensors_meta_get(st, "env_plugin");
    snprintf(env, cap, "%s", plugin && plugin[0] ? plugin : e);
    return 0;
}

/* The file's tensor `name` checked against dst (f32, dst's shape, every
 * element finite: a policy that is not finite acts on nothing) and copied
 * into it. */
static int copy_param(const struct safetensors *st, const char *path, const char *name, struct tensor *dst)
{
    struct tensor *src = safetensors_get(st, name);
    char s1[64], s2[64];
    if (!src) return runfiles_set_error("policy %s: no tensor '%s'", path, name);
    if (src->dtype != DTYPE_F32 || !tensor_same_shape(src, dst))
        return runfiles_set_error("policy %s: '%s' is %s %s, expected f32 %s", path, name, dtype_name(src->dtype),
                                  shape_str(src->ndim, src->shape, s1, sizeof s1),
                                  shape_str(dst->ndim, dst->shape, s2, sizeof s2));
    const float *x = tensor_data(src);
    for (int64_t i = 0; i < src->numel; i++)
        if (!isfinite(x[i]))
            return runfiles_set_error("policy %s: parameter %s[%lld] is %g", path, name, (long long)i, shown(x[i]));
    memcpy(tensor_data(dst), x, (size_t)dst->numel * sizeof(float));
    return 0;
}

/* The file's tensors into the actor's parameters, then the critic's (when
 * one was built); the file holds no other tensor than those and n_extra
 * more (the statistics'). */
static int copy_params(const struct safetensors *st, const char *path, const struct policy_arch *a,
                       struct nn_module *actor, struct nn_module *critic, int n_extra)
{
    char names[POLICY_MAX_TENSORS][64];
    int n = policy_arch_param_names(a, POLICY_MAX_TENSORS, names);
    int na = actor->n_params;
    for (int i = 0; i < n; i++) {
        struct nn_module *m = i < na ? actor : critic;
        if (!m) break;   /* a critic was not asked for */
        if (copy_param(st, path, names[i], m->params[i < na ? i : i - na]) != 0) return -1;
    }
    if (st->n != n + n_extra)
        return runfiles_set_error("policy %s: %d tensors, the architecture has %d%s", path, st->n, n,
                                  n_extra ? " and the statistics 3" : "");
    return 0;
}

/* The comma-separated numbers of metadata `key` into dim new doubles. */
static double *meta_doubles(const struct safetensors *st, const char *what, const char *key, int dim)
{
    const char *v = safetensors_meta_get(st, key);
    double *x = trib_xmalloc((size_t)dim * sizeof *x);
    const char *p = v;
    for (int i = 0; p && i < dim; i++) {
        char *end;
        x[i] = strtod(p, &end);
        bool last = i == dim - 1;
        p = end == p || (last ? *end != '\0' : *end != ',') ? NULL : end + !last;
    }
    if (p) return x;
    free(x);
    runfiles_set_error("%s: metadata '%s' is not %d comma-separated numbers", what, key, dim);
    return NULL;
}

/* The action space the metadata records (act_kind, act_low, act_high)
 * into x->act, checked against the architecture; none recorded: has_act
 * false. */
static int read_act(const struct safetensors *st, const char *what, const struct policy_arch *a,
                    struct policy_extras *x)
{
    const char *kind = safetensors_meta_get(st, "act_kind");
    if (!kind) return 0;
    if (strcmp(kind, "box") && strcmp(kind, "discrete"))
        return runfiles_set_error("%s: metadata 'act_kind' is '%s', not 'box' or 'discrete'", what, kind);
    x->has_act = true;
    x->act.kind = strcmp(kind, "box") == 0 ? SPACE_BOX : SPACE_DISCRETE;
    if (x->act.kind == SPACE_DISCRETE) {
        x->act.n = a->act_dim;
    } else if (a->gaussian) {
        x->act.dim = a->act_dim;
        if (!(x->act.low = meta_doubles(st, what, "act_low", a->act_dim)) ||
            !(x->act.high = meta_doubles(st, what, "act_high", a->act_dim)))
            return -1;
    }
    return act_check(&x->act, a, what);
}

/* The statistics' tensor `name`: f64 of dim elements (ndim 1) or a scalar
 * (dim 0). NULL with the error set. */
static const double *norm_tensor(const struct safetensors *st, const char *what, const char *name, int dim)
{
    const struct tensor *t = NULL;
    for (int i = 0; i < st->n && !t; i++)
        if (strcmp(st->names[i], name) == 0) t = st->tensors[i];
    int64_t shape[1] = { dim };
    char s1[64], s2[64];
    if (!t) {
        runfiles_set_error("%s: observation statistics incomplete: no tensor '%s'", what, name);
    } else if (t->dtype != DTYPE_F64 || t->ndim != (dim ? 1 : 0) || (dim && t->shape[0] != dim)) {
        runfiles_set_error("%s: '%s' is %s %s, expected f64 %s", what, name, dtype_name(t->dtype),
                           shape_str(t->ndim, t->shape, s1, sizeof s1), shape_str(dim ? 1 : 0, shape, s2, sizeof s2));
    } else {
        return tensor_data(t);
    }
    return NULL;
}

/* A positive number of metadata `key` into *out. */
static int meta_double(const struct safetensors *st, const char *what, const char *key, double *out)
{
    const char *v = safetensors_meta_get(st, key);
    char *end = NULL;
    if (!v) return runfiles_set_error("%s: observation statistics incomplete: no metadata '%s'", what, key);
    *out = strtod(v, &end);
    if (end == v || *end) return runfiles_set_error("%s: metadata '%s' is '%s', not a number", what, key, v);
    return 0;
}

/* The statistics the file records (any of obs_norm.mean, obs_norm.var,
 * obs_norm.count, obs_clip, obs_eps present: all of them), checked, into
 * x->norm (its own copies); *n_tensors gets the tensors they took. */
static int read_norm(const struct safetensors *st, const char *what, const struct policy_arch *a,
                     struct policy_extras *x, int *n_tensors)
{
    static const char *const names[] = { "obs_norm.mean", "obs_norm.var", "obs_norm.count" };
    bool any = safetensors_meta_get(st, "obs_clip") || safetensors_meta_get(st, "obs_eps");
    for (int i = 0; i < st->n && !any; i++)
        for (int k = 0; k < 3; k++) any |= strcmp(st->names[i], names[k]) == 0;
    *n_tensors = any ? 3 : 0;
    if (!any) return 0;
    int D = a->obs_dim;
    const double *mean = norm_tensor(st, what, names[0], D), *var = mean ? norm_tensor(st, what, names[1], D) : NULL,
                 *count = var ? norm_tensor(st, what, names[2], 0) : NULL;
    struct policy_norm n = { .dim = D, .mean = (double *)mean, .var = (double *)var };
    if (!count || meta_double(st, what, "obs_clip", &n.clip) || meta_double(st, what, "obs_eps", &n.eps)) return -1;
    n.count = *count;
    if (norm_check(&n, D, what) != 0) return -1;
    n.mean = trib_xmalloc((size_t)D * sizeof(double));
    n.var = trib_xmalloc((size_t)D * sizeof(double));
    memcpy(n.mean, mean, (size_t)D * sizeof(double));
    memcpy(n.var, var, (size_t)D * sizeof(double));
    x->norm = n;
    return 0;
}

/* Metadata env_args (the plug-in's arguments; absent in files before
 * issue 35) into x->env_args. */
static int read_env_args(const struct safetensors *st, const char *what, struct policy_extras *x)
{
    const char *v = safetensors_meta_get(st, "env_args");
    if (!v) return 0;
    size_t n = strlen(v);
    if (n >= sizeof x->env_args)
        return runfiles_set_error("%s: env_args is %zu bytes (at most %zu)", what, n, sizeof x->env_args - 1);
    memcpy(x->env_args, v, n + 1);
    return 0;
}

int policy_file_read(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic, struct policy_extras *x)
{
    *actor = NULL;
    if (critic) *critic = NULL;
    struct policy_extras own = { 0 };
    struct safetensors *st = safetensors_load(path);
    if (!st) return -1;
    struct nn_module *c = NULL;
    char what[600];
    snprintf(what, sizeof what, "policy %s", path);
    int n_norm = 0, rc = read_arch(st, path, a, env, cap);
    if (rc == 0) rc = read_act(st, what, a, &own);
    if (rc == 0) rc = read_norm(st, what, a, &own, &n_norm);
    if (rc == 0) rc = read_env_args(st, what, &own);
    if (rc == 0 && policy_arch_build(a, 0, actor, critic ? &c : NULL) != 0)
        rc = runfiles_set_error("policy %s: %s", path, tensor_last_error());
    if (rc == 0) rc = copy_params(st, path, a, *actor, c, n_norm);
    safetensors_free(st);
    if (rc != 0 || !x) policy_extras_free(&own);
    if (rc != 0) {
        nn_module_free(*actor);
        nn_module_free(c);
        *actor = NULL;
        return -1;
    }
    if (x) *x = own;
    if (critic) *critic = c;
    return 0;
}

int policy_file_load(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic)
{
    return policy_file_read(path, a, env, cap, actor, critic, NULL);
}
