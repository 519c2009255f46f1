/* The RL messages between the agent and its observers: one C struct per
 * message and one schema table (rl/message_schema.h, in messages.c) that
 * the generic pack/unpack walk, used by both ends, so a field is named
 * and checked in one row. Unpack validates kinds, counts, dtypes and
 * shapes (the peer is not trusted) and returns -1 with rl_last_error().
 * Tensors in unpacked structs are new references the caller frees with
 * the message's _clear function; a refused unpack holds nothing. */
#ifndef TRIB_RL_MESSAGES_H
#define TRIB_RL_MESSAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "envs/env.h"
#include "rpc/rpc.h"

/* Function and method names. */
#define RL_FN_SETUP "rl_setup"          /* agent -> observer */
#define RL_FN_ROLLOUT "rl_rollout"      /* agent -> observer (sync) */
#define RL_FN_LOSS "rl_loss"            /* agent -> observer (sync PPO/A2C: the loss's gradients back) */
#define RL_FN_EPISODE "rl_episode"      /* agent -> observer (sync REINFORCE, in the context) */
#define RL_FN_RUN_ASYNC "rl_run_async"  /* agent -> observer (async: loops until told to stop) */
#define RL_FN_UPDATE "rl_update"        /* observer -> agent (async, in the observer's context) */
#define RL_FN_GAVE_UP "rl_gave_up"    /* observer -> agent: (why[, how]) it goes: its env step ran past
                                         * --step-timeout (how absent), or it crashed (how RL_GONE_CRASHED);
                                         * it exits or dies right after */
#define RL_GONE_CRASHED "crashed"
#define RL_FN_SHUTDOWN "rl_shutdown"    /* agent -> observer: training is over, shut down gracefully */
#define RL_FN_GET_STATE "rl_get_state"  /* agent -> observer: its RNG and env state, for a checkpoint */
#define RL_POLICY_TYPE "rl_policy"      /* the agent's policy object, reached through an RRef */
#define RL_POLICY_CTOR "rl_policy_new"
#define RL_METHOD_ACT "act"             /* batched, no graph */
#define RL_METHOD_EVALUATE "evaluate"   /* with graph, in the caller's context */

/* setup(config, policy RRef, observer index 0..K-1, state, generation,
 * norm) -> nil; state is what rl_get_state returned (bytes; resuming a
 * checkpoint) or nil; generation counts the processes that held this
 * observer's rank before (0 at the run's start, 1.. for a restarted one,
 * whose envs and RNG are then seeded apart); norm is the agent's set of
 * normalisation statistics (rl_norm_stats_pack's map) or nil (none).
 *
 * Every `norm` of these messages is a copy of rl_norm_stats_pack's map or
 * nil, checked for its kind only: its reader unpacks it with the run's
 * dims (rl_norm_stats_unpack), which checks the rest. */
struct rl_setup_msg {
    struct rpc_value config;            /* rl_config_to_value's map */
    struct rref *policy;
    int index;
    struct rpc_value state;             /* RPC_BYTES or RPC_NIL */
    int generation;
    struct rpc_value norm;              /* RPC_MAP or RPC_NIL */
};
struct rpc_value rl_setup_pack(const struct rl_setup_msg *m);
int rl_setup_unpack(const struct rpc_value *args, struct rl_setup_msg *m);
void rl_setup_clear(struct rl_setup_msg *m);

/* act(obs [B,D], last) / evaluate(obs [N,D]) requests. `last` marks an
 * observer's final act of a rollout (the agent then stops waiting for its
 * next one when it merges calls). */
struct rpc_value rl_obs_pack(struct tensor *obs, bool last);
/* obs_dim checks the shape; rows >= 1. obs is a new reference. */
int rl_obs_unpack(const struct rpc_value *args, int obs_dim, struct tensor **obs, bool *last);

/* The policy's answer: a = logits [N,C] (categorical) or mean [N,D]
 * (Gaussian), log_std [D] (Gaussian only, else NULL), value [N] (NULL
 * without a value head), and the policy version it was computed with. */
struct rl_policy_out {
    struct tensor *a, *log_std, *value;
    int64_t version;
};
struct rpc_value rl_policy_out_pack(const struct rl_policy_out *o);
/* Checks rows, act_dim, gaussian (log_std present) and value_head. */
int rl_policy_out_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                         struct rl_policy_out *o);
void rl_policy_out_clear(struct rl_policy_out *o);

/* Ranges of the numbers every unpack checks (a peer is not trusted; an
 * error names the field, its value and the range): env steps in one report
 * (a rollout holds at most 2^22 samples, an episode at most INT_MAX steps)
 * and policy versions (an update a microsecond would take 285 years to
 * reach 2^53). Sums of them cannot overflow an int64_t for 2^32 reports. */
#define RL_MSG_MAX_STEPS INT32_MAX
#define RL_MSG_MAX_VERSION ((int64_t)1 << 53)

/* What a rollout (or an episode) produced, for the agent's statistics. */
#define RL_REPORT_EPISODES 128
struct rl_report {
    int64_t steps;                      /* env steps */
    int64_t version0;                   /* policy version at the first forward */
    int64_t episodes;                   /* episodes finished */
    int n_returns;                      /* the last min(episodes, RL_REPORT_EPISODES) */
    double returns[RL_REPORT_EPISODES];
    int lengths[RL_REPORT_EPISODES];
    double min_return;                  /* PyTorch example's running reward uses the smallest */
    double explained_var;               /* of the rollout's values for its returns; NaN: none (REINFORCE) */
    /* the env's named per-step info (spec->info_count values) summed over
     * every step of the episodes finished in this report, info_steps of them */
    int n_info;
    double info_sum[ENV_INFO_MAX];
    int64_t info_steps;
};
/* Adds a finished episode. */
void rl_report_add(struct rl_report *r, double ret, int len);
struct rpc_value rl_report_pack(const struct rl_report *r);
int rl_report_unpack(const struct rpc_value *v, struct rl_report *r);
/* Whether an unpacked report can come from an observer of this run: its
 * steps are one iteration's for the run's algorithm
 * (rl_algo_report_steps_fit, rl/algo.h), and its
 * version0 is not newer than version_now. 0, or -1 with rl_last_error(). */
struct rl_config;
int rl_report_fits(const struct rl_report *r, const struct rl_config *cfg, int max_episode_steps, int64_t version_now);

/* Sync PPO/A2C. The agent evaluates every observer's next minibatch in one
 * recorded forward and pushes each its part: one round trip per update.
 *   rollout() -> (report, obs of minibatch 0 of epoch 0 [M,D]);
 *   loss(epoch, minibatch, weight, policy_out[, prox]), outside any context ->
 *     (stats, obs of the next minibatch or nil after the last, gradient);
 * the observer computes its loss from policy_out (plain data: it makes the
 * tensors local leaves), runs a local backward and answers with
 * d(loss)/d(policy_out); the agent carries those gradients through its
 * recorded forward to the parameters. */
struct rl_rollout_reply { struct rl_report report; struct tensor *obs; struct rpc_value norm; /* the delta */ };
struct rpc_value rl_rollout_reply_pack(const struct rl_rollout_reply *m);
/* obs must be f32 [rows, obs_dim]. */
int rl_rollout_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, struct rl_rollout_reply *m);
void rl_rollout_reply_clear(struct rl_rollout_reply *m);
/* rollout(norm): the agent's set (map) or nil. unpack: *norm borrowed from
 * args. */
struct rpc_value rl_rollout_req_pack(const struct rpc_value *norm);
int rl_rollout_req_unpack(const struct rpc_value *args, const struct rpc_value **norm);

/* loss(epoch, minibatch, weight, policy_out, prox): prox (has_prox) is
 * the proximal policy's answer for the same observations (sync
 * --overlap's decoupled correction, a rollout collected with lag: the
 * agent's acting copy, no graph; docs/design.md §6 "Overlap"), nil when
 * absent (a fresh rollout, or no correction): the loss is then PPO's own. */
struct rl_loss_req {
    int epoch, minibatch;
    double weight;
    struct rl_policy_out out;
    bool has_prox;
    struct rl_policy_out prox;
};
struct rpc_value rl_loss_req_pack(const struct rl_loss_req *m);
/* out, and prox when present, are checked as rl_policy_out_unpack does
 * (rows, act_dim, gaussian, value_head). Tensors are new references:
 * rl_loss_req_clear. */
int rl_loss_req_unpack(const struct rpc_value *args, int rows, int act_dim, bool gaussian, bool value_head,
                       struct rl_loss_req *m);
void rl_loss_req_clear(struct rl_loss_req *m);

struct rl_update_stats { double policy_loss, value_loss, entropy, approx_kl, clipfrac; };
/* An observer's d(loss)/d(policy output) for the rl_policy_out it was sent:
 * a [M,A], log_std [A] (Gaussian only, else NULL), value [M] (NULL without
 * a value head); f32 on the CPU, every element finite. */
struct rl_policy_grad { struct tensor *a, *log_std, *value; };
/* obs: NULL after the rollout's last minibatch. */
struct rl_minibatch_reply { struct rl_update_stats stats; struct tensor *obs; struct rl_policy_grad grad; };
struct rpc_value rl_minibatch_reply_pack(const struct rl_minibatch_reply *m);
/* obs is checked for [rows, obs_dim], grad as the policy output's gradient
 * for `rows` rows (act_dim, gaussian, value_head; finite). */
int rl_minibatch_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, int act_dim, bool gaussian,
                              bool value_head, struct rl_minibatch_reply *m);
void rl_minibatch_reply_clear(struct rl_minibatch_reply *m);

/* REINFORCE's episode reply: [loss scalar, stats, report]. */
struct rl_loss_reply { struct tensor *loss; struct rl_update_stats stats; struct rl_report report; };
struct rpc_value rl_loss_reply_pack(const struct rl_loss_reply *m);
int rl_loss_reply_unpack(const struct rpc_value *v, struct rl_loss_reply *m);
void rl_loss_reply_clear(struct rl_loss_reply *m);

/* update(ctx, version0, report, stats, next_obs) from an async observer,
 * after its backward in ctx; has_report: the report is new (first update
 * of a rollout). next_obs (NULL: nil): the observations of its next
 * minibatch, which the agent evaluates right after the step, with graph, in
 * the request's own context (the observer's next one): one round trip for
 * this update and the next evaluation. Reply: (stop, policy output for
 * next_obs, or nil when there was none or stop is set). */
struct rl_update_req {
    int64_t ctx;
    int64_t version0;
    bool has_report;
    struct rl_report report;
    struct rl_update_stats stats;
    struct tensor *next_obs;
    struct rpc_value norm;              /* with a report: the observer's delta (map), else nil */
};
struct rpc_value rl_update_req_pack(const struct rl_update_req *m);
/* next_obs, when present, must be f32 [N, obs_dim]; it is a new reference
 * (rl_update_req_clear). */
int rl_update_req_unpack(const struct rpc_value *args, int obs_dim, struct rl_update_req *m);
void rl_update_req_clear(struct rl_update_req *m);
/* Whether an unpacked update can come from an observer of this run:
 * version0 not newer than version_now, and a report that fits
 * (rl_report_fits). 0, or -1 with rl_last_error(). */
int rl_update_req_fits(const struct rl_update_req *m, const struct rl_config *cfg, int max_episode_steps,
                       int64_t version_now);
/* stale: the update was dropped by --max-policy-lag (no step, no
 * evaluation): the rest of its rollout is as stale, the observer starts a
 * new one. */
/* norm: the agent's set (map) after it merged the request's delta; nil when
 * the request carried none. */
struct rl_update_reply { bool stop, stale; bool has_out; struct rl_policy_out out; struct rpc_value norm; };
struct rpc_value rl_update_reply_pack(const struct rl_update_reply *m);
/* out is checked for `rows` rows as rl_policy_out_unpack does. */
int rl_update_reply_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                           struct rl_update_reply *m);
void rl_update_reply_clear(struct rl_update_reply *m);

#endif
