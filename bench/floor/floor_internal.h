/* What trib-floor's two files share (trib_floor.c, floor_collect.c): the
 * floor's state, made and freed by trib_floor.c (setup, main), of which
 * floor_collect.c writes only the collection's part (the learners'
 * rollouts, norm, delta, rollouts_done), and the collection of rollouts
 * that floor_collect.c runs as the agent's act server merges the
 * observers' calls. Not installed. */
#ifndef TRIB_BENCH_FLOOR_INTERNAL_H
#define TRIB_BENCH_FLOOR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/run_stats.h"
#include "envs/plugin.h"
#include "optim/optim.h"
#include "rl/arch.h"
#include "rl/config.h"
#include "rl/learner.h"
#include "rl/rl.h"
#include "tensor/autograd.h"

struct floor {
    struct rl_config cfg;
    const struct env_spec *spec;
    struct policy_arch shape;
    struct nn_module *actor, *critic;
    struct tensor **params;
    int n_params;
    enum device dev;
    struct optim *opt;
    struct run_stats *stats;
    int n;                          /* observers */
    struct rl_learner *ln;
    int *idx;                       /* [n*B] each learner's truncated envs (B from k*B) */
    struct tensor *x;               /* [n*B, D] the act rows */
    int64_t version;                /* optimizer steps */
    bool dumped;
    bool norm_on;                   /* --norm-obs / --norm-reward: the run's one set of statistics */
    struct rl_norm_stats norm, delta;
    /* sync mode's overlap (cfg.overlap; agent/sync.c's `ahead`): the next
     * rollout is collected, with the policy before this one's updates,
     * before them, and counted when the next iteration collects it */
    bool overlap;
    bool ahead;                     /* the next rollout is collected, its reports in ahead_rep */
    int64_t rollouts_done;          /* handed over (rl_learner_hand_over's slot: this % 2) */
    int64_t ahead_version, lag;
    int64_t ckpt_updates;           /* where the agent's last checkpoint would be (agent_maybe_checkpoint) */
    /* --overlap-correction decoupled (rl_algo_overlap_prox): a lagged
     * rollout's updates learn against the policy at their start, a copy of
     * the parameters taken then (the agent's acting copy, policy_freeze) */
    bool prox;                      /* the correction is on */
    bool prox_now;                  /* this iteration's rollout is lagged: update() evaluates the copy */
    struct nn_module *prox_actor, *prox_critic;
    struct rl_report ahead_rep[RL_MAX_OBSERVERS];
};

/* The policy's forward of obs [rows, D] into *out, stamped with the
 * floor's version: 0, or -1 (rl_last_error, tensor_last_error). */
int floor_forward(struct floor *f, struct tensor *obs, struct rl_policy_out *out);

/* Every observer's rollout in lockstep (--double-buffer: in halves), merged
 * as the agent's act server merges the observers' calls; with overlap
 * handed over. Not yet counted: floor_rollouts_count. 0 or -1. */
int floor_rollouts_collect(struct floor *f);

/* The agent's collection of a rollout: the reports reps[k] counted in
 * observer order, the statistics' deltas merged. */
void floor_rollouts_count(struct floor *f, const struct rl_report *reps);

/* floor_rollouts_collect, then floor_rollouts_count of the learners'
 * reports. 0 or -1. */
int floor_rollouts(struct floor *f);

#endif
