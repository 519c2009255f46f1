/* The run's one set of normalisation statistics (rl/norm.h), owned by the
 * agent: the observers' deltas merged into it (sync: in worker order once
 * every rollout is in, so a run stays bit-reproducible; async: as each
 * update that carries one arrives), sent back to them (setup, the sync
 * rollout request, the async update's reply), saved in checkpoints and
 * restored on --resume. NULL / nil everywhere when the run normalises
 * nothing. Lowest of agent/'s files: it reads struct agent (state.h) and
 * calls nothing of agent/. Any thread unless said. */
#ifndef TRIB_AGENT_NORM_STATS_H
#define TRIB_AGENT_NORM_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl/config.h"
#include "rl/norm.h"
#include "rpc/rpc.h"

struct agent;
struct agent_norm;

/* The set for a run of cfg on an env of obs_dim observations (count 1e-4,
 * mean 0, var 1: Gymnasium's start), or NULL when cfg normalises nothing.
 * Aborts when out of memory. */
struct agent_norm *agent_norm_new(const struct rl_config *cfg, int obs_dim);
void agent_norm_free(struct agent_norm *n);

/* The agent's current set, NULL when the run normalises nothing. The set
 * changes as deltas merge: in async mode under a->mu (read it holding
 * a->mu, or take agent_norm_copy); in sync mode only between iterations,
 * on the main thread. For evaluation and the export. */
const struct rl_norm_stats *agent_norm(struct agent *a);
/* A copy of it taken under a->mu into *out (rl_norm_stats_free it).
 * false (out untouched) when the run normalises nothing. */
bool agent_norm_copy(struct agent *a, struct rl_norm_stats *out);

/* The set in wire form (rl_norm_stats_pack), nil when off. Takes a->mu. */
struct rpc_value agent_norm_pack(struct agent *a);

/* What a delta must count (docs/design.md §6 "Normalisation
 * statistics"): the ret side, one discounted return per env step of its
 * report (steps = T x B); the obs side, one observation per env step, and
 * besides, in the first report after a set-up, the B reset observations
 * the set-up normalised, unless the set-up restored a saved state (whose
 * observer drops them: the saved run had counted them). So the agent
 * notes each set-up of observer k (restored: it carried a saved state)
 * before sending it, and the next delta of k is checked against it. Any
 * thread (takes a->mu). */
void agent_norm_set_up(struct agent *a, int k, bool restored);

/* Sync: observer k's delta from its rollout reply (nil when off) for a
 * report of `steps` env steps, checked (rl_norm_stats_unpack names a
 * wrong dim, a non-finite value, a negative count or variance, a value
 * beyond the bounds; rl_norm_delta_check a count that is not the rows the
 * report carries), kept until agent_norm_merge_held. 0, or -1 with
 * rl_last_error() (the observer is then to be lost). Main thread. */
int agent_norm_hold(struct agent *a, int k, const struct rpc_value *delta, int64_t steps);
/* Sync: merges observer k's held delta into the set (none held: nothing),
 * checked (rl_norm_stats_merge_checked), and drops it; called for each
 * observer in worker order. 0, or -1 with rl_last_error() and the set
 * unchanged (the observer is then to be lost). Main thread. */
int agent_norm_merge_held(struct agent *a, int k);
/* Drops observer k's held delta (lost before the merge). */
void agent_norm_drop(struct agent *a, int k);

/* Async: the delta of observer k's update (nil: none; an update with a
 * report must carry one when the run normalises, one without a report
 * none) checked as agent_norm_hold does into *d (*has: there was one;
 * then rl_norm_stats_free d), and merged into the set by the caller
 * holding a->mu once the update is accepted (agent_norm_merge_locked: 0,
 * or -1 with rl_last_error() and the set unchanged). k < 0 (a caller that
 * is no observer of the run) sends none. 0 or -1 with rl_last_error(). */
int agent_norm_unpack(struct agent *a, int k, const struct rpc_value *delta, bool has_report, int64_t steps,
                      struct rl_norm_stats *d, bool *has);
int agent_norm_merge_locked(struct agent *a, const struct rl_norm_stats *d);

/* Checkpoints: the set's bytes (rl_norm_stats_save) in a new buffer (free
 * it), NULL and *len 0 when off; and the restore of a checkpoint's bytes
 * (0 or -1 with rl_last_error()). */
unsigned char *agent_norm_save(struct agent *a, size_t *len);
int agent_norm_load(struct agent *a, const void *b, size_t len);

#endif
