/* What a policy becomes outside the agent's memory: the policy file
 * (policy_save, runfiles/policy_file.h), the bytes a checkpoint holds
 * (policy_save_state / policy_load_state), and the copy an evaluation runs
 * and may write as the best policy (policy_copy_*). */
#define _GNU_SOURCE
#include "agent/policy.h"
#include "agent/policy_store.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "envs/env.h"
#include "rl/norm.h"
#include "rl/rl.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

/* Writes n parameters of an architecture as a policy file: the env (a
 * plug-in's path and arguments too), its action space, the obs side of the run's statistics, n_meta more
 * metadata entries. */
static int write_file(struct policy *p, const struct policy_arch *arch, const char *path, const struct env_spec *spec,
                      const struct rl_norm_stats *norm, int n, struct tensor *const *params,
                      const struct safetensors_meta *meta, int n_meta)
{
    struct policy_norm pn = rl_norm_stats_view(norm);
    const char *env = policy_env_name(p);
    bool plugin = strcmp(spec->id, env) != 0;   /* the env was named by its .so */
    struct policy_info info = { .env_id = spec->id, .env_plugin = plugin ? env : NULL,
                                .env_args = plugin ? policy_env_args(p) : NULL, .act = &spec->act, .norm = &pn,
                                .n_meta = n_meta, .meta = meta };
    return policy_file_write(path, arch, &info, n, params) == 0 ? 0 : rl_set_error("%s", runfiles_last_error());
}

int policy_save(struct policy *p, const char *path, const struct env_spec *spec, const struct rl_norm_stats *norm)
{
    struct tensor **params;
    int np = policy_params(p, &params);
    policy_lock_module(p);
    int rc = write_file(p, policy_shape(p), path, spec, norm, np, params, NULL, 0);
    policy_unlock_module(p);
    return rc;
}

void policy_save_state(struct policy *p, unsigned char **out, size_t *len)
{
    struct tensor **params;
    int np = policy_params(p, &params);
    struct nn_module *actor = policy_actor(p);
    policy_lock_module(p);
    size_t n = sizeof actor->rng;
    for (int i = 0; i < np; i++) n += (size_t)params[i]->numel * sizeof(float);
    unsigned char *b = trib_xmalloc(n), *q = b;
    memcpy(q, &actor->rng, sizeof actor->rng);
    q += sizeof actor->rng;
    for (int i = 0; i < np; i++) {
        struct tensor *snap = tensor_snapshot(params[i]);
        tensor_copy_to_host(snap, q);
        tensor_free(snap);
        q += (size_t)params[i]->numel * sizeof(float);
    }
    policy_unlock_module(p);
    *out = b;
    *len = n;
}

int policy_load_state(struct policy *p, const void *buf, size_t len)
{
    struct tensor **params;
    int np = policy_params(p, &params);
    struct nn_module *actor = policy_actor(p);
    size_t n = sizeof actor->rng;
    for (int i = 0; i < np; i++) n += (size_t)params[i]->numel * sizeof(float);
    if (len != n) return rl_set_error("policy: %zu bytes, this architecture needs %zu", len, n);
    /* every parameter finite before any is written (a NaN policy would
     * only fail later, as every observer dropped): refused naming the tensor */
    char names[2 * (RL_MAX_HIDDEN + 1) * 2 + 1][64];
    int nn = policy_arch_param_names(policy_shape(p), (int)(sizeof names / sizeof names[0]), names);
    const unsigned char *q = (const unsigned char *)buf + sizeof actor->rng;
    for (int i = 0; i < np; i++) {
        for (int64_t j = 0; j < params[i]->numel; j++) {
            float x;
            memcpy(&x, q + (size_t)j * sizeof x, sizeof x);
            if (!isfinite(x))
                return rl_set_error("policy: parameter %s[%lld] is %s", i < nn ? names[i] : "?", (long long)j,
                                    isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        }
        q += (size_t)params[i]->numel * sizeof(float);
    }
    q = buf;
    policy_lock_module(p);
    memcpy(&actor->rng, q, sizeof actor->rng);
    q += sizeof actor->rng;
    for (int i = 0; i < np; i++) {
        size_t bytes = (size_t)params[i]->numel * sizeof(float);
        CHECK(tensor_write_from_host(params[i], q, bytes) == 0);   /* sizes checked above */
        q += bytes;
    }
    policy_unlock_module(p);
    return 0;
}

int policy_copy_new(struct policy *p, struct policy_copy *c)
{
    memset(c, 0, sizeof *c);
    c->arch = *policy_shape(p);
    struct tensor **params;
    int np = policy_params(p, &params);
    if (policy_arch_build(&c->arch, 0, &c->actor, c->arch.value_head ? &c->critic : NULL) != 0)
        return rl_set_error("policy copy: %s", tensor_last_error());
    c->actor->training = false;
    int na = c->actor->n_params;
    CHECK(na + (c->critic ? c->critic->n_params : 0) == np);   /* one architecture */
    policy_lock_module(p);
    for (int i = 0; i < np; i++) {
        struct tensor *dst = i < na ? c->actor->params[i] : c->critic->params[i - na];
        struct tensor *snap = tensor_snapshot(params[i]);
        CHECK(snap && dst->numel == snap->numel);
        tensor_copy_to_host(snap, tensor_data(dst));
        tensor_free(snap);
    }
    policy_unlock_module(p);
    return 0;
}

void policy_copy_free(struct policy_copy *c)
{
    nn_module_free(c->actor);
    nn_module_free(c->critic);
    c->actor = c->critic = NULL;
}

int policy_copy_save(struct policy *p, const struct policy_copy *c, const char *path, const struct env_spec *spec,
                     const struct rl_norm_stats *norm, const struct safetensors_meta *extra, int n_extra)
{
    struct tensor *params[POLICY_MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < c->actor->n_params; i++) params[n++] = c->actor->params[i];
    for (int i = 0; c->critic && i < c->critic->n_params; i++) params[n++] = c->critic->params[i];
    return write_file(p, &c->arch, path, spec, norm, n, params, extra, n_extra);
}

