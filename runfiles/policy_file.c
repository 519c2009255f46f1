/* The policy's architecture, its nets and its .safetensors form
 * (policy_file.h). */
#include "runfiles/policy_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    (*actor)->training = a->dropout > 0;
    (*actor)->rng = env_rng_seed(seed, 1000);
    if (a->value_head && critic) {
        sizes[a->n_hidden + 1] = 1;
        *critic = nn_mlp_new(a->n_hidden + 2, sizes, a->tanh ? NN_TANH : NN_RELU, 0.0f, &init_rng);
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

int policy_file_save(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin, int n,
                     struct tensor *const *params)
{
    return policy_file_save_meta(path, a, env_id, env_plugin, n, params, NULL, 0);
}

int policy_file_save_meta(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin,
                          int n, struct tensor *const *params, const struct safetensors_meta *extra, int n_extra)
{
    char names[POLICY_MAX_TENSORS][64];
    int want = policy_arch_param_names(a, (int)(sizeof names / sizeof names[0]), names);
    if (n != want) return runfiles_set_error("policy %s: %d parameters, the architecture has %d", path, n, want);
    if (n_extra < 0 || n_extra > POLICY_MAX_EXTRA_META)
        return runfiles_set_error("policy %s: %d extra metadata entries (at most %d)", path, n_extra, POLICY_MAX_EXTRA_META);
    struct safetensors_entry e[sizeof names / sizeof names[0]];
    struct tensor *snap[sizeof names / sizeof names[0]];
    for (int i = 0; i < n; i++) {
        snap[i] = tensor_snapshot(params[i]);
        e[i] = (struct safetensors_entry){ names[i], snap[i] };
    }
    char hidden[64] = "", od[16], ad[16], dr[32], ls[32];
    size_t k = 0;
    for (int i = 0; i < a->n_hidden && k < sizeof hidden; i++)
        k += (size_t)snprintf(hidden + k, sizeof hidden - k, "%s%d", i ? "," : "", a->hidden[i]);
    snprintf(od, sizeof od, "%d", a->obs_dim);
    snprintf(ad, sizeof ad, "%d", a->act_dim);
    snprintf(dr, sizeof dr, "%.17g", a->dropout);
    snprintf(ls, sizeof ls, "%.17g", a->init_log_std);
    struct safetensors_meta meta[11 + POLICY_MAX_EXTRA_META] = {
        { "format", FORMAT }, { "env", env_id }, { "obs_dim", od }, { "act_dim", ad },
        { "head", a->gaussian ? "gaussian" : "categorical" }, { "value_head", a->value_head ? "true" : "false" },
        { "hidden", hidden }, { "activation", a->tanh ? "tanh" : "relu" }, { "dropout", dr }, { "init_log_std", ls },
        { "env_plugin", env_plugin ? env_plugin : "" },
    };
    int nm = 11 - (env_plugin ? 0 : 1);
    for (int i = 0; i < n_extra; i++) meta[nm++] = extra[i];
    int rc = safetensors_save(path, e, n, meta, nm);
    for (int i = 0; i < n; i++) tensor_free(snap[i]);
    return rc;
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

/* x as printed: NaN without its sign ("nan", never "-nan"), as rl/finite.c
 * prints the parameters it refuses. */
static double shown(double x) { return isnan(x) ? fabs(x) : x; }

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
 * one was built); the file holds no other tensor. */
static int copy_params(const struct safetensors *st, const char *path, const struct policy_arch *a,
                       struct nn_module *actor, struct nn_module *critic)
{
    char names[POLICY_MAX_TENSORS][64];
    int n = policy_arch_param_names(a, POLICY_MAX_TENSORS, names);
    int na = actor->n_params;
    for (int i = 0; i < n; i++) {
        struct nn_module *m = i < na ? actor : critic;
        if (!m) break;   /* a critic was not asked for */
        if (copy_param(st, path, names[i], m->params[i < na ? i : i - na]) != 0) return -1;
    }
    if (st->n != n) return runfiles_set_error("policy %s: %d tensors, the architecture has %d", path, st->n, n);
    return 0;
}

int policy_file_load(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic)
{
    *actor = NULL;
    if (critic) *critic = NULL;
    struct safetensors *st = safetensors_load(path);
    if (!st) return -1;
    struct nn_module *c = NULL;
    int rc = read_arch(st, path, a, env, cap);
    if (rc == 0 && policy_arch_build(a, 0, actor, critic ? &c : NULL) != 0)
        rc = runfiles_set_error("policy %s: %s", path, tensor_last_error());
    if (rc == 0) rc = copy_params(st, path, a, *actor, c);
    safetensors_free(st);
    if (rc != 0) {
        nn_module_free(*actor);
        nn_module_free(c);
        *actor = NULL;
        return -1;
    }
    if (critic) *critic = c;
    return 0;
}
