/* One observer's share of an on-policy algorithm with no RPC in it: its
 * vec_env, its RNG, the rollout buffer, action sampling and the minibatch
 * loss. The policy is called by the owner of the learner (observer/ through
 * the agent's RRef; bench/floor in the same process), so both run the same
 * arithmetic on the same data: the floor is the distributed run's work.
 *
 * A rollout, driven by the caller:
 *   for t in 0..T-1:  obs = rl_learner_obs(l, t)  -> policy act(obs) -> out
 *                     n = rl_learner_step(l, t, &out, idx)
 *                     if n: policy act(rl_learner_final_obs rows idx) -> v
 *                           rl_learner_bootstrap(l, t, n, idx, v)
 *   obs = rl_learner_obs(l, T) -> policy act(obs) -> out
 *   rl_learner_finish(l, out.value)
 * then per epoch and minibatch: rl_learner_minibatch, a recorded forward of
 * its observations, rl_learner_loss. Not thread-safe: one owner. */
#ifndef TRIB_RL_LEARNER_H
#define TRIB_RL_LEARNER_H

#include <stdbool.h>
#include <stdint.h>

#include "envs/env.h"
#include "envs/vec_env.h"
#include "rl/algo.h"
#include "rl/config.h"
#include "rl/estimators.h"
#include "rl/messages.h"
#include "rl/norm.h"
#include "rl/rollout.h"

struct rl_learner {
    struct rl_config cfg;
    const struct rl_algo *algo;     /* cfg's (rl/algo.h) */
    const struct rl_estimator *est; /* cfg's advantage estimator (NULL: an episodes algorithm) */
    const struct env_spec *spec;    /* borrowed */
    struct vec_env *venv;
    int B, D, A;                    /* envs, observation size, actions (classes or dims) */
    bool discrete, value_head;
    uint64_t rng;                   /* sampling and minibatch order */
    struct rl_rollout ro;
    float *cur_obs;                 /* [B,D]: the observation the next step acts on (normalised) */
    float *env_obs;                 /* [B,D]: the envs' own (cur_obs when observations are not normalised) */
    struct rl_norm norm;            /* the run's statistics as this observer sees them (rl/norm.h) */
    float *norm_rew;                /* [B] rewards scaled by norm (--norm-reward) */
    float *final_norm;              /* [B,D] truncated envs' final observations, normalised (--norm-obs) */
    float *env_act_f;               /* [B,A] clipped continuous actions */
    float *reward, *final_obs;      /* [B], [B,D] */
    bool *term, *trunc;             /* [B] */
    /* the minibatch of rl_learner_minibatch */
    int mb_epoch, mb_index, mb_rows;
    struct tensor *mb_obs, *mb_act;
    float *mb_logp, *mb_adv, *mb_ret, *mb_val;
    float *mb_prox_logp;            /* rl_learner_loss's scratch: the minibatch's log-probs under a proximal policy */
    struct rl_report report;        /* of the rollout in progress or last finished */
    float *vt_logp;                 /* [T*B] the target policy's log-probs (an estimator with `correct` only) */
    /* Sync mode's overlap (cfg.overlap, observer/observer_sync.c): a
     * finished rollout is handed over (rl_learner_hand_over) to one of two
     * slots and learnt from there while the next one is collected into ro.
     * The collecting side (ro, the envs, rng, norm, report, cur_obs) and
     * the learning side (done[learn_slot], perms, mb_*) share no field, so
     * two threads may run them at once; the hand-over is the one step that
     * touches both (the caller serialises it with the learning side). */
    bool overlap;                   /* set by the owner after init: minibatches come from done[learn_slot] */
    struct rl_rollout done[2];      /* the finished rollouts (allocated at their first hand-over) */
    int *perms[2];                  /* [epochs * T*B]: each epoch's permutation, drawn at the hand-over */
    int learn_slot;                 /* the slot rl_learner_minibatch gathers from */
};

/* Sets up observer `index` of a run (its envs and RNG seeded from cfg->seed,
 * index and generation as the distributed run does, so a floor run and a
 * distributed run of one seed see the same episodes) and resets the envs.
 * With --norm-obs / --norm-reward every observation (the resets' too) goes
 * through l->norm before it is acted on or stored, and every reward before
 * --reward-scale; the episodes' returns in the report stay raw.
 * T is the rollout length (rl_algo_rollout_steps: 1 for an episodes
 * algorithm, which keeps episodes itself).
 * 0, or -1 with rl_last_error() (l is then deinit-able). */
int rl_learner_init(struct rl_learner *l, const struct rl_config *cfg, const struct env_spec *spec, int index,
                    int generation);
/* Frees everything; accepts a zeroed learner. */
void rl_learner_deinit(struct rl_learner *l);

/* The observation step t acts on ([B,D], borrowed; t == T gives the one
 * after the rollout, for the bootstrap values); at t < T it is also stored
 * in the rollout. t == 0 starts a new report. */
const float *rl_learner_obs(struct rl_learner *l, int t);

/* Step t: samples actions from the policy's answer for rl_learner_obs(l, t)
 * (out->a rows B; out->version noted at t == 0), steps the envs and records
 * rewards and dones. Writes into idx the envs truncated but not terminated,
 * whose final observations (rl_learner_final_obs) need values, and returns
 * their count; -1 with rl_last_error() when the envs fail. */
int rl_learner_step(struct rl_learner *l, int t, const struct rl_policy_out *out, int *idx);
/* Double buffering (cfg.double_buffer, observer/steps.c): the same for
 * envs first..first+rows-1 only, out->a holding their rows; the rows of
 * step t are sampled (and drawn from rng) in env order, one range after
 * the other, so each range of a step comes once, in order. idx gets env
 * numbers (0..B-1). rl_learner_obs_rows stores and returns those rows of
 * rl_learner_obs(l, t) (t == 0 with first 0 starts the report). */
const float *rl_learner_obs_rows(struct rl_learner *l, int t, int first, int rows);
int rl_learner_step_rows(struct rl_learner *l, int t, int first, int rows, const struct rl_policy_out *out, int *idx);
/* Row b's final observation of the last step (D floats, borrowed),
 * normalised frozen (the statistics of the step) for a truncated env b. */
const float *rl_learner_final_obs(const struct rl_learner *l, int b);
/* The values of the n truncated envs idx of step t. */
void rl_learner_bootstrap(struct rl_learner *l, int t, int n, const int *idx, const float *values);
/* Ends the rollout: next_values (B floats, V of rl_learner_obs(l, T)),
 * advantages and returns, report.steps. */
void rl_learner_finish(struct rl_learner *l, const float *next_values);

/* Moves the env's info sums of the episodes finished since the last call
 * into the report (rl_learner_finish does; REINFORCE's episode calls it),
 * and clears the vec_env's statistics. */
void rl_learner_note_info(struct rl_learner *l);

/* An estimator with a correction (V-trace, cfg.vtrace): replaces the
 * finished rollout's advantages and returns by its own, for the target policy whose answer for the
 * rollout's T*B observations is a ([T*B,A] logits or means), log_std ([A],
 * Gaussian) and values ([T*B]), and next_values (its V of
 * rl_learner_obs(l, T)); the behaviour is the policy that acted (its
 * log-probs in the rollout). Its explained variance is updated too. */
void rl_learner_correct(struct rl_learner *l, const float *a, const float *log_std, const float *values,
                        const float *next_values);

/* Gathers minibatch mb (of rl_observer_minibatches(&l->cfg) per epoch:
 * --minibatches in sync mode, --minibatches / --observers in async) of
 * epoch `epoch` of the last rollout (a fresh permutation at mb 0; with
 * overlap: of done[learn_slot], with the permutation drawn at its
 * hand-over) into l->mb_*: observations f32 [M,D] and actions
 * (i64 [M] or f32 [M,A]) as tensors, old log-probs, advantages, returns and
 * old values. 0, or -1 with rl_last_error() (out of range). */
int rl_learner_minibatch(struct rl_learner *l, int epoch, int mb);

/* Overlap (l->overlap): ends the collecting side's part of the rollout just
 * finished: it moves into done[slot] (whose old contents, learnt from
 * already, become the buffer the next rollout fills) and every epoch's
 * permutation of it is drawn from l->rng now, so that the RNG's draws come
 * in the order they do without overlap (a rollout's sampling, then its
 * permutations, then the next rollout's sampling). 0, or -1 with
 * rl_last_error() (out of memory). */
int rl_learner_hand_over(struct rl_learner *l, int slot);
/* Overlap: minibatch 0 of epoch 0 of done[slot], its observations only (a
 * new f32 [M,D] tensor, for the rollout's reply), touching no field of the
 * learning side. NULL with rl_last_error(). */
struct tensor *rl_learner_first_obs(struct rl_learner *l, int slot);

/* The loss of the gathered minibatch (the algorithm's mb_loss) times weight,
 * from the policy's recorded answer for l->mb_obs; stats gets the unweighted
 * terms. prox (NULL: none) is a proximal policy's answer for the same
 * observations (sync --overlap's decoupled correction; no graph): the
 * loss gets the log-probs of the minibatch's actions under it (its
 * prox_logp, computed as the learner's own, rl_dist_eval); an algorithm
 * whose table does not set `prox` refuses one. A new scalar tensor, or
 * NULL with rl_last_error(). */
struct tensor *rl_learner_loss(struct rl_learner *l, const struct rl_policy_out *out, const struct rl_policy_out *prox,
                               double weight, struct rl_update_stats *st);

/* TRIB_DEBUG_DUMP (rl/debug_dump.h): the gathered minibatch as file `name`
 * in the dump directory: weight, observations, actions (as floats), old
 * log-probs, advantages, returns and old values (what test_rl_equiv
 * recomputes an update from). 0, or -1 with rl_last_error(). */
int rl_learner_dump_minibatch(const struct rl_learner *l, const char *name, double weight);

#endif
