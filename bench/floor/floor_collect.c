/* trib-floor's collection of rollouts: every observer's rollout in
 * lockstep, its act calls (and truncations' and --double-buffer's halves'
 * calls) merged into one forward as the agent's act server merges them
 * (agent/policy.c, lockstep), and the agent's counting of the reports and
 * normalisation statistics. The floor's state is trib_floor.c's. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/floor/floor_internal.h"
#include "common/check.h"
#include "tensor/ops.h"

/* Before the rollouts: every observer takes the run's set (the agent's
 * rollout request); after them their deltas are merged in observer order
 * (the agent's rollout replies), so the floor normalises as the run. */
static void norm_adopt(struct floor *f)
{
    for (int k = 0; k < f->n && f->norm_on; k++) rl_norm_adopt(&f->ln[k].norm, &f->norm);
}

static void norm_merge(struct floor *f)
{
    for (int k = 0; k < f->n && f->norm_on; k++) {
        rl_norm_take_delta(&f->ln[k].norm, &f->delta);
        rl_norm_stats_merge(&f->norm, &f->delta);
    }
}

int floor_forward(struct floor *f, struct tensor *obs, struct rl_policy_out *out)
{
    if (rl_arch_forward(&f->shape, f->actor, f->critic, f->dev, obs, out) != 0) return -1;
    out->version = f->version;
    return 0;
}

/* Rows [start, start+rows) of a merged answer, as views. */
static int rows_of(const struct rl_policy_out *all, int64_t start, int64_t rows, struct rl_policy_out *part)
{
    memset(part, 0, sizeof *part);
    part->a = tensor_slice(all->a, start, start + rows);
    part->value = all->value ? tensor_slice(all->value, start, start + rows) : NULL;
    part->log_std = tensor_retain(all->log_std);
    part->version = all->version;
    if (!part->a || (all->value && !part->value)) {
        rl_policy_out_clear(part);
        return -1;
    }
    return 0;
}

/* --double-buffer (observer/steps.c's rollout_halves): observer k's
 * program, run as far as its answered calls let it. It sends half 0's and
 * half 1's act calls of step 0, then for each step and half in turn waits
 * for the half's answer, steps the half, calls for the values of its
 * truncated envs (and waits), and sends the half's next act call; its
 * calls reach the agent in that order, and a merge serves each observer's
 * oldest unanswered call (agent/policy.c, lockstep). */
enum { FC_ACT, FC_BOOT };
struct fcall { int kind, h, t, rows; };
struct fprog {
    struct fcall q[3];              /* sent and not answered, in sending order */
    int qn;
    struct rl_policy_out ans[3];    /* answered, not yet used: half 0's act, half 1's, the truncation call */
    bool have[3];
    int kind, h, t, boot;           /* the call it waits for (boot: its truncated envs) */
    bool done;
};

static void fprog_send(struct fprog *o, int kind, int h, int t, int rows)
{
    CHECK(o->qn < 3);
    o->q[o->qn++] = (struct fcall){ kind, h, t, rows };
}

/* Runs observer k's program while the call it waits for is answered: 0, or
 * -1 (its envs failed). nv: its [B] values at T; left counts the programs
 * not done. */
static int fprog_run(struct floor *f, int k, struct fprog *o, float *nv, int *left)
{
    struct rl_learner *l = &f->ln[k];
    const int H = f->cfg.envs_per_observer / 2, T = l->ro.T;
    while (!o->done) {
        int slot = o->kind == FC_BOOT ? 2 : o->h, h = o->h, t = o->t;
        if (!o->have[slot]) return 0;
        o->have[slot] = false;
        struct rl_policy_out *a = &o->ans[slot];
        int *idx = f->idx + (size_t)k * f->cfg.envs_per_observer + (size_t)h * H, m = 0;
        if (o->kind == FC_BOOT) rl_learner_bootstrap(l, t, o->boot, idx, tensor_data(a->value));
        else if (t == T) memcpy(nv + (size_t)h * H, tensor_data(a->value), (size_t)H * sizeof(float));
        else m = rl_learner_step_rows(l, t, h * H, H, a, idx);
        rl_policy_out_clear(a);
        if (m < 0) return -1;
        if (o->kind == FC_ACT && t == T) {
            o->h = 1;
            if (h == 1) {
                rl_learner_finish(l, nv);
                o->done = true;
                (*left)--;
            }
        } else if (m > 0) {
            fprog_send(o, FC_BOOT, h, t, m);
            o->kind = FC_BOOT;
            o->boot = m;
        } else {
            fprog_send(o, FC_ACT, h, t + 1, H);
            o->kind = FC_ACT;
            o->h = 1 - h;
            o->t = t + (h == 1);
        }
    }
    return 0;
}

/* The lockstep collection of floor_rollouts_collect (below) for --double-buffer. */
static int rollouts_collect_halves(struct floor *f)
{
    const int B = f->cfg.envs_per_observer, H = B / 2, D = f->spec->obs.dim;
    struct fprog *o = calloc((size_t)f->n, sizeof *o);
    float *nv = calloc((size_t)f->n * B, sizeof *nv);
    int64_t at[RL_MAX_OBSERVERS], rows[RL_MAX_OBSERVERS];
    CHECK(o && nv);
    bool was = autograd_set_enabled(false);
    int rc = 0, left = f->n;
    norm_adopt(f);
    for (int k = 0; k < f->n; k++) {
        fprog_send(&o[k], FC_ACT, 0, 0, H);
        fprog_send(&o[k], FC_ACT, 1, 0, H);
    }
    while (left > 0 && rc == 0) {
        int64_t n_rows = 0;
        for (int k = 0; k < f->n; k++) {
            at[k] = n_rows;
            rows[k] = o[k].qn ? o[k].q[0].rows : 0;
            n_rows += rows[k];
        }
        int64_t xs[2] = { n_rows, D };
        struct tensor *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, xs);
        if (!x) {
            rc = -1;
            break;
        }
        for (int k = 0; k < f->n; k++) {
            if (rows[k] == 0) continue;
            float *dst = (float *)tensor_data(x) + (size_t)at[k] * D;
            const struct fcall *c = &o[k].q[0];
            const int *idx = f->idx + (size_t)k * B + (size_t)c->h * H;
            if (c->kind == FC_ACT)
                memcpy(dst, rl_learner_obs_rows(&f->ln[k], c->t, c->h * H, H), (size_t)H * D * sizeof(float));
            else
                for (int i = 0; i < c->rows; i++)
                    memcpy(dst + (size_t)i * D, rl_learner_final_obs(&f->ln[k], idx[i]), (size_t)D * sizeof(float));
        }
        struct rl_policy_out all;
        rc = floor_forward(f, x, &all);
        tensor_free(x);
        if (rc != 0) break;
        for (int k = 0; k < f->n && rc == 0; k++) {
            if (rows[k] == 0) continue;
            struct fcall c = o[k].q[0];
            int slot = c.kind == FC_BOOT ? 2 : c.h;
            if (rows_of(&all, at[k], rows[k], &o[k].ans[slot]) != 0) rc = -1;
            o[k].have[slot] = rc == 0;
            memmove(o[k].q, o[k].q + 1, (size_t)--o[k].qn * sizeof o[k].q[0]);
        }
        rl_policy_out_clear(&all);
        for (int k = 0; k < f->n && rc == 0; k++) rc = fprog_run(f, k, &o[k], nv + (size_t)k * B, &left);
    }
    autograd_set_enabled(was);
    for (int k = 0; k < f->n; k++)
        for (int i = 0; i < 3; i++)
            if (o[k].have[i]) rl_policy_out_clear(&o[k].ans[i]);
    free(o);
    free(nv);
    for (int k = 0; k < f->n && rc == 0 && f->overlap; k++)
        rc = rl_learner_hand_over(&f->ln[k], (int)(f->rollouts_done % 2));
    f->rollouts_done += rc == 0 && f->overlap;
    return rc;
}

/* Every observer's rollout in lockstep, merged as the agent's act server
 * merges the observers' calls (agent/policy.c, lockstep): each observer
 * has one call pending at a time (its step t's act call; after a step that
 * truncated n envs, the act call for their final observations' values; at
 * t == T its last call, for the bootstrap values), and each forward serves
 * every pending call, in observer order. So a truncation's call is merged
 * with the other observers' calls of the moment, as in the distributed run
 * (a forward's rows do not come out the same bits in every batch size).
 * With overlap handed over (rl_learner_hand_over). Not yet counted:
 * floor_rollouts_count. */
int floor_rollouts_collect(struct floor *f)
{
    if (f->cfg.double_buffer) return rollouts_collect_halves(f);
    const int B = f->cfg.envs_per_observer, D = f->spec->obs.dim, T = f->ln[0].ro.T;
    int t[RL_MAX_OBSERVERS], boot[RL_MAX_OBSERVERS];   /* the pending call's step; > 0: step t's truncation call */
    int64_t at[RL_MAX_OBSERVERS], rows[RL_MAX_OBSERVERS];
    bool was = autograd_set_enabled(false);
    int rc = 0, left = f->n;
    norm_adopt(f);
    for (int k = 0; k < f->n; k++) t[k] = boot[k] = 0;
    while (left > 0 && rc == 0) {
        int64_t n_rows = 0;
        for (int k = 0; k < f->n; k++) {
            at[k] = n_rows;
            rows[k] = t[k] > T ? 0 : boot[k] > 0 ? boot[k] : B;
            n_rows += rows[k];
        }
        int64_t xs[2] = { n_rows, D };
        struct tensor *x = n_rows == f->x->shape[0] ? tensor_retain(f->x) : tensor_new(DTYPE_F32, DEVICE_CPU, 2, xs);
        if (!x) {
            rc = -1;
            break;
        }
        for (int k = 0; k < f->n; k++) {
            float *dst = (float *)tensor_data(x) + (size_t)at[k] * D;
            if (rows[k] == 0) continue;
            if (boot[k] == 0) memcpy(dst, rl_learner_obs(&f->ln[k], t[k]), (size_t)B * D * sizeof(float));
            else
                for (int i = 0; i < boot[k]; i++)
                    memcpy(dst + (size_t)i * D, rl_learner_final_obs(&f->ln[k], f->idx[(size_t)k * B + i]),
                           (size_t)D * sizeof(float));
        }
        struct rl_policy_out all;
        rc = floor_forward(f, x, &all);
        tensor_free(x);
        if (rc != 0) break;
        for (int k = 0; k < f->n && rc == 0; k++) {
            struct rl_policy_out part;
            if (rows[k] == 0) continue;
            if (rows_of(&all, at[k], rows[k], &part) != 0) {
                rc = -1;
                break;
            }
            struct rl_learner *l = &f->ln[k];
            int *idx = f->idx + (size_t)k * B;
            if (boot[k] > 0) {   /* the values of step t's truncated envs */
                rl_learner_bootstrap(l, t[k], boot[k], idx, tensor_data(part.value));
                boot[k] = 0;
                t[k]++;
            } else if (t[k] == T) {
                rl_learner_finish(l, tensor_data(part.value));
                t[k]++;
                left--;
            } else {
                int m = rl_learner_step(l, t[k], &part, idx);
                if (m < 0) rc = -1;
                else if (m > 0) boot[k] = m;
                else t[k]++;
            }
            rl_policy_out_clear(&part);
        }
        rl_policy_out_clear(&all);
    }
    autograd_set_enabled(was);
    for (int k = 0; k < f->n && rc == 0 && f->overlap; k++) rc = rl_learner_hand_over(&f->ln[k], (int)(f->rollouts_done % 2));
    f->rollouts_done += rc == 0 && f->overlap;
    return rc;
}

/* The agent's collection of a rollout: the reports reps[k] counted in
 * observer order, the statistics' deltas merged. */
void floor_rollouts_count(struct floor *f, const struct rl_report *reps)
{
    for (int k = 0; k < f->n; k++) {
        run_stats_report(f->stats, &reps[k]);
        run_stats_observer_steps(f->stats, k, reps[k].steps);
    }
    norm_merge(f);
}

int floor_rollouts(struct floor *f)
{
    struct rl_report reps[RL_MAX_OBSERVERS];
    if (floor_rollouts_collect(f) != 0) return -1;
    for (int k = 0; k < f->n; k++) reps[k] = f->ln[k].report;
    floor_rollouts_count(f, reps);
    return 0;
}
