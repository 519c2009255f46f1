/* Policy architecture, construction and .safetensors form. */
#include "rl/policy_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "envs/env.h"
#include "rl/algo.h"
#include "rl/messages.h"
#include "rl/finite.h"
#include "rl/rl.h"
#include "tensor/ops.h"
#include "rl/safetensors.h"

#define FORMAT "tributary-policy-1"

struct rl_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim)
{
    struct rl_arch a = { .obs_dim = obs_dim, .act_dim = act_n_or_dim, .gaussian = !discrete,
                         .value_head = rl_algo_get(cfg->algo) && rl_algo_get(cfg->algo)->value_head, .n_hidden = cfg->hidden.n,
                         .tanh = cfg->activation == RL_ACT_TANH,
                         .dropout = cfg->dropout, .init_log_std = cfg->init_log_std };
    for (int i = 0; i < cfg->hidden.n; i++) a.hidden[i] = cfg->hidden.v[i];
    return a;
}

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

int64_t rl_arch_param_count(const struct rl_arch *a)
{
    int64_t n = mlp_params(a->obs_dim, a->n_hidden, a->hidden, a->act_dim) + (a->gaussian ? a->act_dim : 0);
    if (a->value_head) n += mlp_params(a->obs_dim, a->n_hidden, a->hidden, 1);
    return n;
}

int rl_arch_for_env(const struct rl_config *cfg, const struct env_spec *spec, const char *what, struct rl_arch *out)
{
    bool discrete = spec->act.kind == SPACE_DISCRETE;
    int acts = discrete ? spec->act.n : spec->act.dim;
    const char *unit = discrete ? "actions" : "action dims";
    if (spec->obs.dim < 1 || spec->obs.dim > RL_MAX_DIM)
        return rl_set_error("%s: the env %s has %d observation dims (at most %d)", what, spec->id, spec->obs.dim,
                            RL_MAX_DIM);
    if (acts < 1 || acts > RL_MAX_DIM)
        return rl_set_error("%s: the env %s has %d %s (at most %d)", what, spec->id, acts, unit, RL_MAX_DIM);
    struct rl_arch a = rl_arch_for(cfg, spec->obs.dim, discrete, acts);
    int64_t n = rl_arch_param_count(&a);   /* dims and hidden sizes <= 2^16, 4 layers: no overflow */
    if (n > RL_MAX_POLICY_PARAMS) {
        char hid[64] = "";
        size_t k = 0;
        for (int i = 0; i < a.n_hidden && k < sizeof hid; i++)
            k += (size_t)snprintf(hid + k, sizeof hid - k, "%s%d", i ? "," : "", a.hidden[i]);
        return rl_set_error("%s: a policy of --hidden %s for the env %s (%d observation dims, %d %s) has %lld "
                            "parameters (at most %lld)",
                            what, hid, spec->id, spec->obs.dim, acts, unit, (long long)n,
                            (long long)RL_MAX_POLICY_PARAMS);
    }
    *out = a;
    return 0;
}

int rl_arch_check(const struct rl_arch *a, const char *what, uint64_t have_bytes)
{
    if (a->n_hidden < 1 || a->n_hidden > RL_MAX_HIDDEN || a->obs_dim < 1 || a->obs_dim > RL_MAX_DIM ||
        a->act_dim < 1 || a->act_dim > RL_MAX_DIM)
        return rl_set_error("%s: architecture sizes out of range", what);
    for (int i = 0; i < a->n_hidden; i++)
        if (a->hidden[i] < 1 || a->hidden[i] > RL_MAX_DIM)
            return rl_set_error("%s: hidden size %d outside 1..%d", what, a->hidden[i], RL_MAX_DIM);
    int64_t n = rl_arch_param_count(a);
    if ((uint64_t)n * sizeof(float) > have_bytes)
        return rl_set_error("%s: the architecture has %lld parameters (%llu bytes), the file holds %llu bytes of them",
                            what, (long long)n, (unsigned long long)n * sizeof(float), (unsigned long long)have_bytes);
    if (n > RL_MAX_POLICY_PARAMS)
        return rl_set_error("%s: the architecture has %lld parameters (at most %lld)", what, (long long)n,
                            (long long)RL_MAX_POLICY_PARAMS);
    return 0;
}

int rl_arch_build(const struct rl_arch *a, uint64_t seed, struct nn_module **actor, struct nn_module **critic)
{
    *actor = NULL;
    if (critic) *critic = NULL;
    uint64_t init_rng = seed;
    int sizes[RL_MAX_HIDDEN + 2];
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

int rl_arch_forward(const struct rl_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *o)
{
    memset(o, 0, sizeof *o);
    struct tensor *x = dev == DEVICE_CPU ? tensor_retain(obs) : tensor_to(obs, dev);
    if (!x) return -1;
    struct tensor *out[NN_MAX_IO + 1] = { 0 };
    int n_out = 0;
    int rc = nn_forward(actor, 1, &x, &n_out, out);
    CHECK(rc != 0 || n_out == (a->gaussian ? 2 : 1));
    if (rc == 0 && critic) {
        struct tensor *v = nn_forward1(critic, x);
        int64_t len = x->shape[0];
        out[n_out] = v ? tensor_reshape(v, 1, &len) : NULL;
        tensor_free(v);
        if (!out[n_out++]) rc = -1;
    }
    tensor_free(x);
    struct tensor *cpu[NN_MAX_IO + 1] = { 0 };
    for (int i = 0; i < n_out; i++) {
        if (rc == 0) {
            cpu[i] = dev == DEVICE_CPU ? tensor_retain(out[i]) : tensor_to(out[i], DEVICE_CPU);
            if (!cpu[i]) rc = -1;
        }
        tensor_free(out[i]);
    }
    if (rc != 0) {
        for (int i = 0; i < n_out; i++) tensor_free(cpu[i]);
        return -1;
    }
    int k = 0;
    o->a = cpu[k++];
    o->log_std = a->gaussian ? cpu[k++] : NULL;
    o->value = a->value_head ? cpu[k++] : NULL;
    return 0;
}

int rl_arch_param_names(const struct rl_arch *a, int cap, char (*names)[64])
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

int rl_policy_save(const char *path, const struct rl_arch *a, const char *env_id, const char *env_plugin, int n,
                   struct tensor *const *params)
{
    char names[2 * (RL_MAX_HIDDEN + 1) * 2 + 1][64];
    int want = rl_arch_param_names(a, (int)(sizeof names / sizeof names[0]), names);
    if (n != want) return rl_set_error("policy %s: %d parameters, the architecture has %d", path, n, want);
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
    struct safetensors_meta meta[] = {
        { "format", FORMAT }, { "env", env_id }, { "obs_dim", od }, { "act_dim", ad },
        { "head", a->gaussian ? "gaussian" : "categorical" }, { "value_head", a->value_head ? "true" : "false" },
        { "hidden", hidden }, { "activation", a->tanh ? "tanh" : "relu" }, { "dropout", dr }, { "init_log_std", ls },
        { "env_plugin", env_plugin ? env_plugin : "" },
    };
    int nm = (int)(sizeof meta / sizeof meta[0]) - (env_plugin ? 0 : 1);
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
        return rl_set_error("policy %s: metadata '%s' missing or not in %d..%d", st->path, key, lo, hi);
    *out = (int)x;
    return 0;
}

int rl_policy_load(const char *path, struct rl_arch *a, char *env, size_t cap, struct nn_module **actor,
                   struct nn_module **critic)
{
    *actor = NULL;
    if (critic) *critic = NULL;
    struct safetensors *st = safetensors_load(path);
    if (!st) return -1;
    int rc = -1;
    const char *fmt = safetensors_meta_get(st, "format"), *head = safetensors_meta_get(st, "head"),
               *act = safetensors_meta_get(st, "activation"), *hid = safetensors_meta_get(st, "hidden"),
               *vh = safetensors_meta_get(st, "value_head"), *e = safetensors_meta_get(st, "env"),
               *dr = safetensors_meta_get(st, "dropout");
    memset(a, 0, sizeof *a);
    if (!fmt || strcmp(fmt, FORMAT) != 0) {
        rl_set_error("policy %s: not a tributary policy (metadata format is not '" FORMAT "')", path);
        goto out;
    }
    if (meta_int(st, "obs_dim", 1, RL_MAX_DIM, &a->obs_dim) || meta_int(st, "act_dim", 1, RL_MAX_DIM, &a->act_dim))
        goto out;
    if (!head || !act || !hid || !vh || !e || !dr || (strcmp(head, "gaussian") && strcmp(head, "categorical")) ||
        (strcmp(act, "tanh") && strcmp(act, "relu"))) {
        rl_set_error("policy %s: metadata head/activation/hidden/value_head/env/dropout missing or unknown", path);
        goto out;
    }
    a->gaussian = strcmp(head, "gaussian") == 0;
    a->tanh = strcmp(act, "tanh") == 0;
    a->value_head = strcmp(vh, "true") == 0;
    char *dr_end = NULL;
    a->dropout = strtod(dr, &dr_end);
    if (dr_end == dr || *dr_end || !(a->dropout >= 0 && a->dropout < 1)) {
        rl_set_error("policy %s: bad dropout '%s'", path, dr);
        goto out;
    }
    for (const char *p = hid; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > RL_MAX_DIM || a->n_hidden == RL_MAX_HIDDEN || (*end && *end != ',')) {
            rl_set_error("policy %s: bad hidden sizes '%s'", path, hid);
            goto out;
        }
        a->hidden[a->n_hidden++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (a->n_hidden == 0) {
        rl_set_error("policy %s: no hidden sizes", path);
        goto out;
    }
    /* what the metadata describes must fit in the file before it is built */
    uint64_t have = 0;
    for (int i = 0; i < st->n; i++) have += tensor_nbytes(st->tensors[i]);
    char what[600];
    snprintf(what, sizeof what, "policy %s", path);
    if (rl_arch_check(a, what, have) != 0) goto out;
    const char *plugin = safetensors_meta_get(st, "env_plugin");
    snprintf(env, cap, "%s", plugin && plugin[0] ? plugin : e);
    struct nn_module *c = NULL;
    if (rl_arch_build(a, 0, actor, critic ? &c : NULL) != 0) {
        rl_set_error("policy %s: %s", path, tensor_last_error());
        goto out;
    }
    char names[2 * (RL_MAX_HIDDEN + 1) * 2 + 1][64];
    int n = rl_arch_param_names(a, (int)(sizeof names / sizeof names[0]), names);
    int na = (*actor)->n_params;
    for (int i = 0; i < n; i++) {
        struct nn_module *m = i < na ? *actor : c;
        if (!m) break;   /* a critic was not asked for */
        struct tensor *dst = m->params[i < na ? i : i - na];
        struct tensor *src = safetensors_get(st, names[i]);
        char s1[64], s2[64];
        if (!src) {
            rl_set_error("policy %s: no tensor '%s'", path, names[i]);
            goto fail;
        }
        if (src->dtype != DTYPE_F32 || !tensor_same_shape(src, dst)) {
            rl_set_error("policy %s: '%s' is %s %s, expected f32 %s", path, names[i], dtype_name(src->dtype),
                         shape_str(src->ndim, src->shape, s1, sizeof s1), shape_str(dst->ndim, dst->shape, s2, sizeof s2));
            goto fail;
        }
        /* a policy that is not finite acts on nothing: refused, naming the tensor */
        if (rl_check_params(1, &src, (const char *const[]){ names[i] }) != 0) {
            rl_set_error("policy %s: %s", path, rl_last_error());
            goto fail;
        }
        memcpy(tensor_data(dst), tensor_data(src), (size_t)dst->numel * sizeof(float));
    }
    if (st->n != n) {
        rl_set_error("policy %s: %d tensors, the architecture has %d", path, st->n, n);
        goto fail;
    }
    if (critic) *critic = c;
    rc = 0;
    goto out;
fail:
    nn_module_free(*actor);
    nn_module_free(c);
    *actor = NULL;
out:
    safetensors_free(st);
    return rc;
}
