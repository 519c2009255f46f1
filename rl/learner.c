/* One observer's arithmetic without RPC (learner.h): envs, sampling, the
 * rollout buffer, minibatches and their loss. */
#include "rl/learner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl/algo_shape.h"
#include "rl/debug_dump.h"
#include "rl/losses.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "rl/sample.h"
#include "tensor/ops.h"

/* The run's statistics and their buffers (none when off: env_obs is
 * cur_obs, the rewards are the envs'). */
static int init_norm(struct rl_learner *l)
{
    l->env_obs = l->cur_obs;
    if (rl_norm_init(&l->norm, &l->cfg, l->B, l->D) != 0) return -1;
    if (!rl_norm_on(&l->norm)) return 0;
    size_t BD = (size_t)l->B * l->D;
    l->norm_rew = calloc((size_t)l->B, sizeof(float));
    if (l->cfg.norm_obs) {
        l->env_obs = calloc(BD, sizeof(float));
        l->final_norm = calloc(BD, sizeof(float));
    }
    if (!l->norm_rew || !l->env_obs || (l->cfg.norm_obs && !l->final_norm))
        return rl_set_error("out of memory for %d envs", l->B);
    return 0;
}

/* The new observations (env_obs) of envs first..first+rows-1 become the
 * ones acted on. */
static void take_obs(struct rl_learner *l, int first, int rows)
{
    if (l->env_obs == l->cur_obs) return;
    size_t at = (size_t)first * l->D;
    memcpy(l->cur_obs + at, l->env_obs + at, (size_t)rows * l->D * sizeof(float));
    rl_norm_obs(&l->norm, l->cur_obs + at, rows);
}

int rl_learner_init(struct rl_learner *l, const struct rl_config *cfg, const struct env_spec *spec, int index,
                    int generation)
{
    memset(l, 0, sizeof *l);
    l->cfg = *cfg;
    l->spec = spec;
    l->B = cfg->envs_per_observer;
    l->D = spec->obs.dim;
    l->discrete = spec->act.kind == SPACE_DISCRETE;
    l->A = l->discrete ? spec->act.n : spec->act.dim;
    l->algo = rl_algo_of(cfg);
    if (!l->algo) return rl_set_error("unknown algorithm %d", cfg->algo);
    l->est = rl_estimator_for(cfg, l->algo->estimator);
    l->value_head = l->algo->value_head;
    l->mb_epoch = l->mb_index = -1;
    /* a restarted observer (generation > 0) starts fresh envs on streams of
     * its own, not a replay of its predecessor's first episodes */
    uint64_t stream = (uint64_t)generation << 32 | (uint64_t)index;
    l->venv = vec_env_new(spec, l->B, env_rng_seed(cfg->seed, 1u << 20 | stream), 0);
    if (!l->venv) return rl_set_error("vec_env: %s", env_last_error());
    l->rng = env_rng_seed(cfg->seed, 2u << 20 | stream);
    int T = rl_algo_rollout_steps(l->algo, cfg);
    if (rl_rollout_init(&l->ro, T, l->B, l->D, l->discrete, l->A) != 0) return -1;
    size_t B = (size_t)l->B, D = (size_t)l->D, n = (size_t)T * B;
    l->cur_obs = calloc(B * D, sizeof(float));
    l->env_act_f = calloc(B * (size_t)l->A, sizeof(float));
    l->reward = calloc(B, sizeof(float));
    l->final_obs = calloc(B * D, sizeof(float));
    l->term = calloc(B, sizeof(bool));
    l->trunc = calloc(B, sizeof(bool));
    l->mb_logp = calloc(n, sizeof(float));
    l->mb_prox_logp = calloc(n, sizeof(float));
    l->mb_adv = calloc(n, sizeof(float));
    l->mb_ret = calloc(n, sizeof(float));
    l->mb_val = calloc(n, sizeof(float));
    if (l->est && l->est->correct && !(l->vt_logp = calloc(n, sizeof(float)))) return rl_set_error("out of memory for V-trace");
    if (!l->cur_obs || !l->env_act_f || !l->reward || !l->final_obs || !l->term || !l->trunc || !l->mb_logp ||
        !l->mb_prox_logp || !l->mb_adv || !l->mb_ret || !l->mb_val)
        return rl_set_error("out of memory for %d envs", l->B);
    if (init_norm(l) != 0) return -1;
    vec_env_reset(l->venv, l->env_obs);
    take_obs(l, 0, l->B);
    return 0;
}

static void drop_minibatch(struct rl_learner *l)
{
    tensor_free(l->mb_obs);
    tensor_free(l->mb_act);
    l->mb_obs = l->mb_act = NULL;
    l->mb_epoch = l->mb_index = -1;
}

void rl_learner_deinit(struct rl_learner *l)
{
    drop_minibatch(l);
    rl_rollout_deinit(&l->ro);
    vec_env_free(l->venv);
    free(l->env_act_f);
    free(l->reward);
    free(l->final_obs);
    free(l->term);
    free(l->trunc);
    free(l->mb_logp);
    free(l->mb_prox_logp);
    free(l->mb_adv);
    free(l->mb_ret);
    free(l->mb_val);
    free(l->vt_logp);
    for (int i = 0; i < 2; i++) {
        rl_rollout_deinit(&l->done[i]);
        free(l->perms[i]);
    }
    if (l->env_obs != l->cur_obs) free(l->env_obs);
    free(l->cur_obs);
    free(l->norm_rew);
    free(l->final_norm);
    rl_norm_free(&l->norm);
    memset(l, 0, sizeof *l);
}

const float *rl_learner_obs(struct rl_learner *l, int t) { return rl_learner_obs_rows(l, t, 0, l->B); }

const float *rl_learner_obs_rows(struct rl_learner *l, int t, int first, int rows)
{
    if (t == 0 && first == 0) {
        memset(&l->report, 0, sizeof l->report);
        if (!l->overlap) drop_minibatch(l);   /* with overlap it is the learning side's */
    }
    size_t at = (size_t)first * l->D;
    if (t < l->ro.T)
        memcpy(l->ro.obs + (size_t)t * l->B * l->D + at, l->cur_obs + at, (size_t)rows * l->D * sizeof(float));
    return l->cur_obs + at;
}

static void note_finished(struct rl_learner *l, int b)
{
    double ret;
    int len;
    if (vec_env_last_episode(l->venv, b, &ret, &len) == 0) rl_report_add(&l->report, ret, len);
}

int rl_learner_step(struct rl_learner *l, int t, const struct rl_policy_out *out, int *idx)
{
    return rl_learner_step_rows(l, t, 0, l->B, out, idx);
}

int rl_learner_step_rows(struct rl_learner *l, int t, int first, int rows, const struct rl_policy_out *out, int *idx)
{
    struct rl_rollout *ro = &l->ro;
    const int B = l->B, A = l->A;
    size_t base = (size_t)t * B + first;
    if (t == 0 && first == 0) l->report.version0 = out->version;
    const float *a = tensor_data(out->a);
    if (l->discrete) {
        rl_sample_categorical(rows, A, a, &l->rng, false, ro->act_i + base, ro->logp + base);
    } else {
        float *act = l->env_act_f + (size_t)first * A;
        rl_sample_gaussian(rows, A, a, tensor_data(out->log_std), &l->rng, false, ro->act_f + base * A,
                           ro->logp + base);
        for (int i = 0; i < rows * A; i++) {
            int d = i % A;
            double x = ro->act_f[base * A + i];
            x = fmin(fmax(x, l->spec->act.low[d]), l->spec->act.high[d]);
            act[i] = (float)x;
        }
    }
    memcpy(ro->values + base, tensor_data(out->value), (size_t)rows * sizeof(float));
    const float *act_f = l->env_act_f + (size_t)first * A;
    const void *acts = l->discrete ? (const void *)(ro->act_i + base) : (const void *)act_f;
    size_t at = (size_t)first * l->D;
    if (vec_env_step_range(l->venv, first, rows, acts, l->env_obs + at, l->reward + first, l->term + first,
                           l->trunc + first, l->final_obs + at) != 0)
        return rl_set_error("env step: %s", env_last_error());
    take_obs(l, first, rows);
    const float *rew = l->reward;
    if (rl_norm_on(&l->norm)) {
        rl_norm_reward_rows(&l->norm, first, rows, l->reward + first, l->term + first, l->norm_rew + first);
        rew = l->norm_rew;
    }
    int n = 0;
    for (int b = first; b < first + rows; b++) {
        ro->rewards[(size_t)t * B + b] = (float)(rew[b] * l->cfg.reward_scale);
        ro->terminated[(size_t)t * B + b] = l->term[b];
        ro->truncated[(size_t)t * B + b] = l->trunc[b];
        if (l->term[b] || l->trunc[b]) note_finished(l, b);
        if (l->trunc[b] && !l->term[b]) idx[n++] = b;
    }
    for (int i = 0; i < n && l->final_norm; i++) {
        size_t row = (size_t)idx[i] * l->D;
        memcpy(l->final_norm + row, l->final_obs + row, (size_t)l->D * sizeof(float));
        rl_norm_stats_apply(&l->norm.now, l->final_norm + row, 1);
    }
    return n;
}

const float *rl_learner_final_obs(const struct rl_learner *l, int b)
{
    return (l->final_norm ? l->final_norm : l->final_obs) + (size_t)b * l->D;
}

void rl_learner_bootstrap(struct rl_learner *l, int t, int n, const int *idx, const float *values)
{
    for (int i = 0; i < n; i++) l->ro.final_values[(size_t)t * l->B + idx[i]] = values[i];
}

void rl_learner_note_info(struct rl_learner *l)
{
    struct vec_env_stats st;
    vec_env_get_stats(l->venv, &st);
    l->report.n_info = l->spec->info_count;
    vec_env_info_sums(l->venv, l->report.info_sum);
    l->report.info_steps = (int64_t)st.length_sum;
    vec_env_clear_stats(l->venv);
}

void rl_learner_finish(struct rl_learner *l, const float *next_values)
{
    rl_learner_note_info(l);
    l->report.steps = (int64_t)l->ro.T * l->B;
    memcpy(l->ro.next_values, next_values, (size_t)l->B * sizeof(float));
    if (l->est) l->est->estimate(&l->ro, &l->cfg);
    l->report.explained_var = l->ro.explained_var;
}

void rl_learner_correct(struct rl_learner *l, const float *a, const float *log_std, const float *values,
                        const float *next_values)
{
    struct rl_rollout *ro = &l->ro;
    int n = ro->T * ro->B;
    if (l->discrete) rl_logp_categorical(n, l->A, a, ro->act_i, l->vt_logp);
    else rl_logp_gaussian(n, l->A, a, log_std, ro->act_f, l->vt_logp);
    l->est->correct(ro, &l->cfg, l->vt_logp, values, next_values);
    l->report.explained_var = ro->explained_var;
}

int rl_learner_hand_over(struct rl_learner *l, int slot)
{
    struct rl_rollout *d = &l->done[slot];
    int N = l->ro.T * l->ro.B;
    if (!d->obs && rl_rollout_init(d, l->ro.T, l->B, l->D, l->discrete, l->A) != 0) return -1;
    if (!l->perms[slot] && !(l->perms[slot] = calloc((size_t)l->cfg.epochs * N, sizeof(int))))
        return rl_set_error("out of memory for %d permutations of %d rows", l->cfg.epochs, N);
    struct rl_rollout spare = *d;
    *d = l->ro;
    l->ro = spare;
    for (int e = 0; e < l->cfg.epochs; e++) rl_permutation(N, &l->rng, l->perms[slot] + (size_t)e * N);
    return 0;
}

struct tensor *rl_learner_first_obs(struct rl_learner *l, int slot)
{
    struct rl_rollout *d = &l->done[slot];
    int N = d->T * d->B, M = N / l->cfg.minibatches;
    float *scratch = calloc((size_t)4 * M, sizeof(float));
    struct tensor *obs = NULL, *act = NULL;
    if (!scratch) {
        rl_set_error("out of memory for a minibatch of %d rows", M);
        return NULL;
    }
    memcpy(d->perm, l->perms[slot], (size_t)N * sizeof(int));   /* epoch 0's */
    if (rl_rollout_gather(d, 0, M, &obs, &act, scratch, scratch + M, scratch + 2 * M, scratch + 3 * M) != 0) obs = NULL;
    tensor_free(act);
    free(scratch);
    return obs;
}

int rl_learner_minibatch(struct rl_learner *l, int epoch, int mb)
{
    struct rl_rollout *ro = l->overlap ? &l->done[l->learn_slot] : &l->ro;
    int per_epoch = rl_observer_minibatches(&l->cfg);
    int N = ro->T * ro->B, M = N / per_epoch;
    if (mb < 0 || epoch < 0 || mb >= per_epoch || epoch >= l->cfg.epochs)
        return rl_set_error("minibatch %d of epoch %d is out of range", mb, epoch);
    if (l->overlap && !l->perms[l->learn_slot]) return rl_set_error("minibatch: no rollout was handed over");
    drop_minibatch(l);
    if (mb == 0 && l->overlap) memcpy(ro->perm, l->perms[l->learn_slot] + (size_t)epoch * N, (size_t)N * sizeof(int));
    else if (mb == 0) rl_permutation(N, &l->rng, ro->perm);
    if (rl_rollout_gather(ro, mb * M, M, &l->mb_obs, &l->mb_act, l->mb_logp, l->mb_adv, l->mb_ret, l->mb_val) != 0)
        return -1;
    l->mb_epoch = epoch;
    l->mb_index = mb;
    l->mb_rows = M;
    return 0;
}

/* The log-probs of the minibatch's actions under the proximal policy's
 * answer prox, as the loss computes the learner's own (rl_dist_eval; prox
 * has no graph), into l->mb_prox_logp. 0, or -1 with rl_last_error(). */
static int prox_logp(struct rl_learner *l, const struct rl_policy_out *prox)
{
    if (!l->algo->prox)
        return rl_set_error("loss: a proximal policy's answer for %s, whose loss takes none", l->algo->title);
    struct tensor *logp = NULL, *ent = NULL;
    int rc = rl_dist_eval(l->discrete ? RL_DIST_CATEGORICAL : RL_DIST_GAUSSIAN, prox->a, prox->log_std, l->mb_act,
                          &logp, &ent);
    if (rc == 0) tensor_copy_to_host(logp, l->mb_prox_logp);
    tensor_free(logp);
    tensor_free(ent);
    return rc == 0 ? 0 : rl_set_error("loss: the proximal policy: %s", rl_last_error());
}

struct tensor *rl_learner_loss(struct rl_learner *l, const struct rl_policy_out *out, const struct rl_policy_out *prox,
                               double weight, struct rl_update_stats *st)
{
    if (!l->mb_obs) {
        rl_set_error("loss: no minibatch gathered");
        return NULL;
    }
    if (prox && prox_logp(l, prox) != 0) return NULL;
    int M = l->mb_rows;
    struct tensor *loss = NULL, *logp = NULL, *ent = NULL;
    if (rl_dist_eval(l->discrete ? RL_DIST_CATEGORICAL : RL_DIST_GAUSSIAN, out->a, out->log_std, l->mb_act, &logp,
                     &ent) == 0) {
        struct rl_mb_loss_in in = { .logp = logp, .entropy = ent, .values = out->value, .old_logp = l->mb_logp,
                                    .prox_logp = prox ? l->mb_prox_logp : NULL, .adv = l->mb_adv, .ret = l->mb_ret,
                                    .old_values = l->mb_val, .n = M, .weight = weight, .cfg = &l->cfg };
        struct rl_loss_stats ls = { 0 };
        loss = l->algo->mb_loss(&in, &ls);
        *st = (struct rl_update_stats){ ls.policy_loss, ls.value_loss, ls.entropy, ls.approx_kl, ls.clipfrac };
    }
    tensor_free(logp);
    tensor_free(ent);
    return loss;
}

int rl_learner_dump_minibatch(const struct rl_learner *l, const char *name, double weight)
{
    if (!l->mb_obs) return rl_set_error("dump: no minibatch gathered");
    int M = l->mb_rows;
    float *a = calloc((size_t)M * l->ro.act_dim, sizeof *a);
    if (!a) return rl_set_error("dump: out of memory");
    for (int64_t i = 0; i < l->mb_act->numel; i++)
        a[i] = l->discrete ? (float)((const int64_t *)tensor_data(l->mb_act))[i] : ((const float *)tensor_data(l->mb_act))[i];
    float w = (float)weight;
    const float *arrays[] = { &w, tensor_data(l->mb_obs), a, l->mb_logp, l->mb_adv, l->mb_ret, l->mb_val };
    int64_t counts[] = { 1, l->mb_obs->numel, l->mb_act->numel, M, M, M, M };
    int rc = rl_debug_dump(rl_debug_dump_dir(), name, 7, arrays, counts);
    free(a);
    return rc;
}
