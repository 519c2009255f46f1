/* trib-floor: the compute floor of an RL run (docs/design.md §8). The same
 * algorithm, network, envs, seeds, rollout shape, minibatches and epochs as
 * tributary-train with the same flags, run in one process with no RPC:
 * observer k's envs and RNG (rl/learner), the policy's forward
 * (rl_arch_forward) and the same merging of rows (every observer's pending
 * act call in one forward, as the agent's lockstep server merges them,
 * every observer's minibatch in one recorded forward, one backward with
 * the gradients grouped as the agent sums them, one clipped optimizer
 * step): the same updates, bit for bit (docs/design.md §8). Its wall time and env steps/s
 * are what the distributed run is measured against (x_floor in
 * scripts/bench rl). Sync order only: an async run's floor is the sync one.
 * A benchmark, not a trainer: no checkpoints, metrics or plug-in loading
 * rules beyond tributary-train's. The last stdout line is tributary-train's
 * JSON summary. TRIB_DEBUG_DUMP writes the first update's files as the
 * distributed run does (tests/rl/test_rl_equiv compares them). With sync
 * mode's --overlap it collects rollout k+1 with the policy before rollout
 * k's updates, as the agent does, and with --overlap-correction decoupled
 * learns from it against a copy of the parameters taken before its updates
 * (the agent's acting copy) (docs/design.md §8). This file makes and
 * frees the floor's state (setup, main) and runs its updates; floor_collect.c
 * collects the rollouts. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/floor/floor_internal.h"
#include "common/check.h"
#include "common/clock.h"
#include "envs/plugin.h"
#include "optim/optim.h"
#include "rl/algo_shape.h"
#include "rl/config.h"
#include "rl/debug_dump.h"
#include "rl/learner.h"
#include "rl/losses.h"
#include "rl/arch.h"
#include "rl/rl.h"
#include "rl/sample.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

#define PROG "trib-floor"

static int die(const char *what)
{
    fprintf(stderr, PROG ": %s\n", what);
    return 1;
}

static void dump_first(struct floor *f, int k, double weight)
{
    char name[64];
    snprintf(name, sizeof name, "minibatch_%d.bin", k);
    if (rl_learner_dump_minibatch(&f->ln[k], name, weight) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
}

static void dump_params(struct floor *f, const char *name)
{
    const float *arrays[64];
    int64_t counts[64];
    if (f->n_params > 64 || f->dev != DEVICE_CPU) return;
    for (int i = 0; i < f->n_params; i++) {
        arrays[i] = tensor_data(f->params[i]);
        counts[i] = f->params[i]->numel;
    }
    if (rl_debug_dump(rl_debug_dump_dir(), name, f->n_params, arrays, counts) != 0)
        fprintf(stderr, PROG ": %s\n", rl_last_error());
}

/* The clipped optimizer step of the parameters' .grad, then cleared. */
static int step(struct floor *f)
{
    struct tensor *grads[64];
    CHECK(f->n_params <= 64);
    int n_present = 0;
    struct tensor *present[64];
    for (int i = 0; i < f->n_params; i++) {
        grads[i] = f->params[i]->grad;
        if (grads[i]) present[n_present++] = grads[i];
    }
    int rc = 0;
    if (f->cfg.max_grad_norm > 0 && n_present > 0 && optim_clip_grad_norm(n_present, present, f->cfg.max_grad_norm, NULL) != 0)
        rc = -1;
    if (rc == 0) rc = optim_step(f->opt, grads);
    for (int i = 0; i < f->n_params; i++) {
        tensor_free(f->params[i]->grad);
        f->params[i]->grad = NULL;
    }
    if (rc == 0) f->version++;
    return rc;
}

/* Observer k's rows [k*rows, (k+1)*rows) of a merged answer, as views;
 * log_std (a Gaussian head's, shared by every row: NULL otherwise) its own
 * node of it (update()). */
static int part_of(const struct rl_policy_out *all, int k, int64_t rows, struct tensor *log_std, struct rl_policy_out *part)
{
    memset(part, 0, sizeof *part);
    part->a = tensor_slice(all->a, k * rows, (k + 1) * rows);
    part->value = all->value ? tensor_slice(all->value, k * rows, (k + 1) * rows) : NULL;
    part->log_std = tensor_retain(log_std);
    part->version = all->version;
    if (!part->a || (all->value && !part->value)) {
        rl_policy_out_clear(part);
        return -1;
    }
    return 0;
}

/* The proximal policy (--overlap-correction decoupled): the parameters
 * as they are now copied into prox_actor/prox_critic (made at the first
 * call), as the agent's policy_freeze copies them into its acting copy.
 * 0 or -1. */
static int prox_take(struct floor *f)
{
    if (!f->prox_actor) {
        if (policy_arch_build(&f->shape, 0, &f->prox_actor, f->critic ? &f->prox_critic : NULL) != 0) return -1;
        if (f->dev != DEVICE_CPU &&
            (nn_module_to(f->prox_actor, f->dev) != 0 || (f->prox_critic && nn_module_to(f->prox_critic, f->dev) != 0)))
            return -1;
        CHECK(f->prox_actor->n_params + (f->prox_critic ? f->prox_critic->n_params : 0) == f->n_params);
    }
    int na = f->prox_actor->n_params, rc = 0;
    for (int i = 0; i < f->n_params && rc == 0; i++) {
        struct tensor *dst = i < na ? f->prox_actor->params[i] : f->prox_critic->params[i - na];
        void *host = malloc(tensor_nbytes(f->params[i]));
        CHECK(host != NULL);
        tensor_copy_to_host(f->params[i], host);
        rc = tensor_write_from_host(dst, host, tensor_nbytes(f->params[i]));
        free(host);
    }
    f->prox_actor->training = f->actor->training;
    return rc;
}

/* The proximal policy's answer for the merged minibatch x, split per
 * observer into prox[k] (no graph), as the agent's acting copy answers
 * (policy_evaluate_frozen_batch). 0 or -1. */
static int prox_answer(struct floor *f, struct tensor *x, struct rl_policy_out *prox)
{
    struct rl_policy_out all = { 0 };
    bool was = autograd_set_enabled(false);
    int rc = rl_arch_forward(&f->shape, f->prox_actor, f->prox_critic, f->dev, x, &all);
    for (int k = 0; k < f->n && rc == 0; k++)
        rc = part_of(&all, k, f->ln[k].mb_rows, all.log_std, &prox[k]);
    autograd_set_enabled(was);
    rl_policy_out_clear(&all);
    return rc;
}

/* One update: every observer's minibatch (e, mb) in one recorded forward
 * (and, prox_now, the proximal policy's answer for it), each observer's
 * loss weighted 1/n, one backward, one step. */
static int update(struct floor *f, int e, int mb, int64_t version0)
{
    struct tensor *xs[RL_MAX_OBSERVERS], *total = NULL;
    struct rl_update_stats st[RL_MAX_OBSERVERS], mean = { 0 };
    for (int k = 0; k < f->n; k++) {
        if (rl_learner_minibatch(&f->ln[k], e, mb) != 0) return -1;
        xs[k] = f->ln[k].mb_obs;
    }
    bool dump = rl_debug_dump_dir() && !f->dumped;
    if (dump)
        for (int k = 0; k < f->n; k++) dump_first(f, k, 1.0 / f->n);
    struct tensor *x = f->n == 1 ? tensor_retain(xs[0]) : tensor_cat(f->n, xs, 0);
    struct rl_policy_out all, prox[RL_MAX_OBSERVERS] = { 0 };
    if (!x || floor_forward(f, x, &all) != 0) {
        tensor_free(x);
        return -1;
    }
    if (f->prox_now && prox_answer(f, x, prox) != 0) {
        for (int k = 0; k < f->n; k++) rl_policy_out_clear(&prox[k]);
        rl_policy_out_clear(&all);
        tensor_free(x);
        return -1;
    }
    tensor_free(x);
    /* The Gaussian head's one log_std: a node of its own per observer (a
     * reshape to its own shape), so that its gradient is summed within each
     * observer's loss first and then over the observers in observer order,
     * as agent/policy_batch.c sums what each observer's backward sends (a
     * float sum in another grouping parts in the last bit). The backward
     * runs the latest node first, so they are made last observer first. */
    struct tensor *ls[RL_MAX_OBSERVERS] = { 0 };
    int rc = 0;
    for (int k = f->n - 1; k >= 0 && all.log_std && rc == 0; k--)
        if (!(ls[k] = tensor_reshape(all.log_std, all.log_std->ndim, all.log_std->shape))) rc = -1;
    for (int k = 0; k < f->n && rc == 0; k++) {
        struct rl_policy_out part;
        struct tensor *loss = NULL;
        if (part_of(&all, k, f->ln[k].mb_rows, ls[k], &part) == 0) {
            loss = rl_learner_loss(&f->ln[k], &part, f->prox_now ? &prox[k] : NULL, 1.0 / f->n, &st[k]);
            rl_policy_out_clear(&part);
        }
        struct tensor *sum = !loss ? NULL : total ? tensor_add(total, loss) : tensor_retain(loss);
        tensor_free(loss);
        tensor_free(total);
        total = sum;
        if (!total) rc = -1;
    }
    rl_policy_out_clear(&all);
    for (int k = 0; k < f->n; k++) {
        tensor_free(ls[k]);
        rl_policy_out_clear(&prox[k]);
    }
    if (rc == 0) rc = tensor_backward(total, NULL, false);
    tensor_free(total);
    if (dump && rc == 0) dump_params(f, "params_before.bin");
    if (rc == 0) rc = step(f);
    if (dump && rc == 0) dump_params(f, "params_after.bin");
    f->dumped = true;
    if (rc != 0) return -1;
    for (int k = 0; k < f->n; k++) {
        mean.policy_loss += st[k].policy_loss / f->n;
        mean.value_loss += st[k].value_loss / f->n;
        mean.entropy += st[k].entropy / f->n;
        mean.approx_kl += st[k].approx_kl / f->n;
        mean.clipfrac += st[k].clipfrac / f->n;
    }
    run_stats_update(f->stats, f->overlap ? f->lag : f->version - 1 - version0, &mean);
    return 0;
}

/* Observer k's episode with a recorded forward per step into lp and rew
 * (cap steps at most): its step count, or -1 (*n the log-probs to free). */
static int play_episode(struct floor *f, int k, struct tensor **lp, float *rew, int cap, int *n)
{
    struct rl_learner *l = &f->ln[k];
    int64_t is[2] = { 1, 1 }, os[2] = { 1, l->D };
    bool done = false;
    *n = 0;
    while (!done && *n < cap) {
        struct tensor *x = tensor_from_f32(2, os, l->cur_obs);
        struct rl_policy_out out;
        if (!x || floor_forward(f, x, &out) != 0) {
            tensor_free(x);
            return -1;
        }
        tensor_free(x);
        if (*n == 0) l->report.version0 = out.version;
        int action = 0;
        rl_sample_categorical(1, l->A, tensor_data(out.a), &l->rng, false, &action, NULL);
        int64_t a64 = action;
        struct tensor *idx = tensor_from_data(DTYPE_I64, 2, is, &a64);
        struct tensor *lsm = idx ? tensor_log_softmax(out.a) : NULL;
        lp[*n] = lsm ? tensor_gather(lsm, idx) : NULL;
        tensor_free(lsm);
        tensor_free(idx);
        rl_policy_out_clear(&out);
        if (!lp[*n] || vec_env_step(l->venv, &action, l->cur_obs, l->reward, l->term, l->trunc, NULL) != 0) {
            *n += lp[*n] != NULL;
            return -1;
        }
        rew[(*n)++] = (float)(l->reward[0] * f->cfg.reward_scale);
        done = l->term[0] || l->trunc[0];
    }
    return *n;
}

/* Observer k's episode, its loss (the algorithm's ep_loss) added to
 * *total, its report noted; *least its lowest return. 0 or -1. */
static int episode_into(struct floor *f, int k, struct tensor **total, double *least)
{
    struct rl_learner *l = &f->ln[k];
    int cap = f->spec->max_episode_steps > 0 ? f->spec->max_episode_steps : 10000, n = 0;
    struct tensor **lp = calloc((size_t)cap, sizeof *lp);
    float *rew = calloc((size_t)cap, sizeof *rew);
    CHECK(lp && rew);
    memset(&l->report, 0, sizeof l->report);
    int rc = play_episode(f, k, lp, rew, cap, &n) < 0 ? -1 : 0;
    if (rc == 0) {
        double ret;
        int len;
        if (vec_env_last_episode(l->venv, 0, &ret, &len) == 0) rl_report_add(&l->report, ret, len);
        l->report.steps = n;
        struct tensor *cat = tensor_cat(n, lp, 0);
        struct tensor *loss = cat ? l->algo->ep_loss(cat, rew, n, &f->cfg) : NULL;
        struct tensor *sum = !loss ? NULL : *total ? tensor_add(*total, loss) : tensor_retain(loss);
        tensor_free(cat);
        tensor_free(loss);
        tensor_free(*total);
        *total = sum;
        if (!*total) rc = -1;
        run_stats_report(f->stats, &l->report);
        run_stats_observer_steps(f->stats, k, n);
        *least = fmin(*least, l->report.min_return);
    }
    for (int i = 0; i < n; i++) tensor_free(lp[i]);
    free(lp);
    free(rew);
    return rc;
}

/* An episodes algorithm (REINFORCE as the sync example): one episode per
 * observer with a recorded forward per step, the losses summed, one
 * backward, one step. */
static int episodes_iteration(void *u)
{
    struct floor *f = u;
    struct tensor *total = NULL;
    double least = INFINITY;
    int64_t version0 = f->version;
    int rc = 0;
    for (int k = 0; k < f->n && rc == 0; k++) rc = episode_into(f, k, &total, &least);
    if (rc == 0) rc = tensor_backward(total, NULL, false);
    tensor_free(total);
    if (rc == 0) rc = step(f);
    if (rc != 0) return -1;
    struct rl_update_stats none = { 0 };
    run_stats_update(f->stats, f->version - 1 - version0, &none);
    run_stats_running(f->stats, least);
    return 0;
}

/* A rollouts algorithm: rollouts everywhere, then epochs x minibatches of
 * one update each. */
/* Overlap: agent/sync.c's boundary_is_still (the run stops after this
 * iteration's `updates`, or checkpoints). */
static bool boundary_is_still(struct floor *f, int updates)
{
    int64_t after = run_stats_updates(f->stats) + updates;
    if (run_stats_solved(f->stats) || run_stats_out_of_budget(f->stats)) return true;
    if (f->cfg.max_updates > 0 && after >= f->cfg.max_updates) return true;
    return f->cfg.logdir[0] && f->cfg.checkpoint_every > 0 && after - f->ckpt_updates >= f->cfg.checkpoint_every;
}

/* Overlap, as agent/sync.c: the rollout collected ahead counted (or a fresh
 * one collected and counted), the next one collected ahead with the
 * policy as it is now (unless the boundary after this iteration is still),
 * then this one's updates from its slot. */
static int overlapped_rollouts(struct floor *f, int64_t version0)
{
    int total = f->cfg.epochs * f->cfg.minibatches;
    if (f->ahead) {
        f->ahead = false;
        floor_rollouts_count(f, f->ahead_rep);
    } else {
        f->ahead_version = f->version;
        if (floor_rollouts(f) != 0) return -1;
    }
    f->lag = version0 - f->ahead_version;
    f->prox_now = f->prox && f->lag > 0;
    if (f->prox_now && prox_take(f) != 0) return -1;
    for (int k = 0; k < f->n; k++) f->ln[k].learn_slot = (int)((f->rollouts_done - 1) % 2);
    if (!boundary_is_still(f, total)) {
        f->ahead_version = f->version;
        if (floor_rollouts_collect(f) != 0) return -1;
        for (int k = 0; k < f->n; k++) f->ahead_rep[k] = f->ln[k].report;
        f->ahead = true;
    }
    return 0;
}

static int rollouts_iteration(void *u)
{
    struct floor *f = u;
    int64_t version0 = f->version;
    if ((f->overlap ? overlapped_rollouts(f, version0) : floor_rollouts(f)) != 0) return -1;
    for (int e = 0; e < f->cfg.epochs; e++)
        for (int mb = 0; mb < f->cfg.minibatches; mb++)
            if (update(f, e, mb, version0) != 0) return -1;
    int64_t done = run_stats_updates(f->stats);   /* the boundary's checkpoint, which the floor does not write */
    if (f->cfg.logdir[0] && f->cfg.checkpoint_every > 0 && done - f->ckpt_updates >= f->cfg.checkpoint_every)
        f->ckpt_updates = done;
    return 0;
}

static int iteration(struct floor *f)
{
    if (f->cfg.anneal_lr && f->cfg.max_steps > 0)   /* the agent's schedule (agent_maybe_anneal) */
        optim_set_lr(f->opt, optim_lr_linear(f->cfg.lr, 1.0, 0.0, f->cfg.max_steps, run_stats_env_steps(f->stats)));
    const struct rl_drivers d = { .drive = { [RL_SHAPE_EPISODES] = episodes_iteration,
                                             [RL_SHAPE_ROLLOUTS] = rollouts_iteration },
                                  .ctx = f };
    return rl_algo_drive(rl_algo_of(&f->cfg), &d);
}

static int setup(struct floor *f)
{
    const struct env_spec *s = f->spec;
    bool discrete = s->act.kind == SPACE_DISCRETE;
    f->shape = rl_arch_for(&f->cfg, s->obs.dim, discrete, discrete ? s->act.n : s->act.dim);
    f->dev = f->cfg.device == RL_DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU;
    if (policy_arch_build(&f->shape, f->cfg.seed, &f->actor, &f->critic) != 0) return -1;
    if (f->dev != DEVICE_CPU &&
        (nn_module_to(f->actor, f->dev) != 0 || (f->critic && nn_module_to(f->critic, f->dev) != 0)))
        return -1;
    int na = f->actor->n_params, nc = f->critic ? f->critic->n_params : 0;
    f->n_params = na + nc;
    f->params = calloc((size_t)f->n_params, sizeof *f->params);
    CHECK(f->params != NULL);
    for (int i = 0; i < na; i++) f->params[i] = f->actor->params[i];
    for (int i = 0; i < nc; i++) f->params[na + i] = f->critic->params[i];
    struct optim_hyper h = optim_defaults((enum optim_kind)f->cfg.optimizer);
    h.lr = f->cfg.lr;
    h.eps = f->cfg.opt_eps;
    f->opt = optim_new((enum optim_kind)f->cfg.optimizer, &h, f->n_params, f->params);
    if (!f->opt) return rl_set_error("optimizer: %s", optim_last_error());
    f->n = f->cfg.observers;
    f->ln = calloc((size_t)f->n, sizeof *f->ln);
    f->idx = calloc((size_t)f->n * f->cfg.envs_per_observer, sizeof *f->idx);
    CHECK(f->ln && f->idx);
    const struct rl_algo *algo = rl_algo_of(&f->cfg);
    f->overlap = f->cfg.overlap && f->cfg.mode == RL_MODE_SYNC && algo && algo->shape == RL_SHAPE_ROLLOUTS;
    f->prox = f->overlap && rl_algo_overlap_prox(algo, &f->cfg);
    if (f->overlap) {   /* its updates' lag is recorded, as the agent's */
        struct run_stats_mode m = { .policy_lag = true };
        run_stats_set_mode(f->stats, &m);
    }
    /* sync order only: every observer splits its rollout into --minibatches
     * (an async observer's own split, rl_observer_minibatches, is not the floor's) */
    struct rl_config sync_cfg = f->cfg;
    sync_cfg.mode = RL_MODE_SYNC;
    for (int k = 0; k < f->n; k++) {
        if (rl_learner_init(&f->ln[k], &sync_cfg, s, k, 0) != 0) return -1;
        f->ln[k].overlap = f->overlap;
    }
    f->norm_on = rl_norm_on(&f->ln[0].norm);
    int nd = f->cfg.norm_obs ? s->obs.dim : 0;
    if (f->norm_on && (rl_norm_stats_init(&f->norm, nd, f->cfg.norm_reward, f->cfg.clip_obs, f->cfg.clip_reward) != 0 ||
                       rl_norm_stats_init(&f->delta, nd, f->cfg.norm_reward, f->cfg.clip_obs, f->cfg.clip_reward) != 0))
        return -1;
    int64_t xs[2] = { (int64_t)f->n * f->cfg.envs_per_observer, s->obs.dim };
    f->x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, xs);
    return f->x ? 0 : -1;
}

static const char about[] =
    "trib-floor: the compute floor of a tributary-train run: the same flags, algorithm, envs, seeds and\n"
    "merging of rows, in one process with no RPC (sync order). scripts/bench rl reports each run's\n"
    "wall time and steps/s against it (x_floor). Prints tributary-train's JSON summary last.\n";

int main(int argc, char **argv)
{
    struct floor f = { 0 };
    int rc = rl_config_parse(&f.cfg, PROG, about, argc, argv, NULL, 0);
    if (rc >= 0) return rc;
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);   /* as the agent and observers */
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct env_plugin *plugin = NULL;
    f.spec = rl_config_open_env(&f.cfg, &plugin);
    if (!f.spec) return die(rl_last_error());
    double target = !f.cfg.stop_at_target ? NAN : isnan(f.cfg.target) ? f.spec->reward_threshold : f.cfg.target;
    f.stats = run_stats_new(&f.cfg, target);
    run_stats_set_env(f.stats, f.spec);
    int status = 1;
    const char *why = "failure";
    if (setup(&f) != 0) {
        fprintf(stderr, PROG ": %s%s\n", rl_last_error(), tensor_last_error());
    } else {
        char desc[512];
        rl_config_describe(&f.cfg, desc, sizeof desc);
        if (!f.cfg.quiet) printf("trib-floor: %s; target %g\n", desc, target);
        for (;;) {
            if (run_stats_solved(f.stats)) { why = "solved"; status = 0; break; }
            if (run_stats_out_of_budget(f.stats)) { why = "budget"; break; }
            if (iteration(&f) != 0) {
                fprintf(stderr, PROG ": %s %s\n", rl_last_error(), tensor_last_error());
                break;
            }
            struct run_interval iv;
            if (run_stats_interval(f.stats, f.version, false, &iv) && !f.cfg.quiet) run_stats_print(f.stats, stdout, &iv);
        }
    }
    run_stats_summary(f.stats, stdout, status == 0, 0, 0, why);   /* as tributary-train: failures too */
    for (int k = 0; f.ln && k < f.n; k++) rl_learner_deinit(&f.ln[k]);
    free(f.ln);
    free(f.idx);
    rl_norm_stats_free(&f.norm);
    rl_norm_stats_free(&f.delta);
    tensor_free(f.x);
    optim_free(f.opt);
    free(f.params);
    nn_module_free(f.actor);
    nn_module_free(f.critic);
    nn_module_free(f.prox_actor);
    nn_module_free(f.prox_critic);
    run_stats_free(f.stats);
    env_plugin_close(plugin);
    return status;
}
