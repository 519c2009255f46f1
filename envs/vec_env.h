/* vec_env: B environments of one spec stepped together into caller-owned
 * batched buffers, with same-step autoreset and episode statistics. Built-in
 * specs take a specialised batched step; any other spec is stepped per env. */
#ifndef TRIB_ENVS_VEC_ENV_H
#define TRIB_ENVS_VEC_ENV_H

#include "envs/env.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vec_env;

/* Totals over the episodes finished since creation (or the last clear). */
struct vec_env_stats {
    uint64_t steps;      /* env steps taken: num_envs per vec_env_step */
    uint64_t episodes;   /* episodes finished (terminated or truncated) */
    double return_sum, return_min, return_max;  /* 0 when episodes == 0 */
    uint64_t length_sum;
    int length_min, length_max;
};

/* Force the generic per-env path (spec->step through its pointer) even for a
 * built-in: the reference the batched fast path is tested against. */
#define VEC_ENV_GENERIC 1u

/* B = num_envs copies of spec; env i draws from its own RNG seeded with
 * env_rng_seed(seed, i). The spec is borrowed and must outlive the vec_env.
 * When the spec has create, it runs on each env in turn, on this thread.
 * Returns NULL with env_last_error() set on a bad spec, num_envs < 1,
 * states too big to allocate, or a create that failed ("vec_env_new: env 3
 * of Hopper-v4: mj_makeData failed"; the envs made before it are destroyed).
 * Call vec_env_reset before the first vec_env_step. */
struct vec_env *vec_env_new(const struct env_spec *spec, int num_envs, uint64_t seed,
                            unsigned flags);
/* Runs the spec's destroy on every env. Accepts NULL. */
void vec_env_free(struct vec_env *v);

const struct env_spec *vec_env_spec(const struct vec_env *v);
int vec_env_num_envs(const struct vec_env *v);

/* Env i's RNG becomes env_rng_seed(seed, first + i): what env first + i
 * of vec_env_new(spec, first + B, seed) starts from, so a caller running
 * many envs' episodes a batch at a time (evaluation) gives each the
 * stream it would have had among all of them. Call vec_env_reset next. */
void vec_env_reseed(struct vec_env *v, uint64_t seed, int first);

/* Reset every env (continuing its RNG stream) and write the B x obs.dim
 * initial observations into obs. Running episode returns/lengths restart;
 * the statistics are kept. */
void vec_env_reset(struct vec_env *v, float *obs);

/* Step all B envs. actions: B ints (discrete) or B x act.dim floats (box).
 * Writes obs (B x obs.dim float32), reward, terminated and truncated (B each).
 * truncated[i] is true when env i has now taken max_episode_steps steps in
 * this episode (as Gymnasium's TimeLimit: it may be true together with
 * terminated). A spec with max_episode_steps 0 is truncated only at INT_MAX
 * steps, since episode lengths are ints.
 *
 * Autoreset, same step: when env i finishes (terminated or truncated), its
 * reward/terminated/truncated are those of the finishing step, the final
 * observation of the episode goes to row i of final_obs (if final_obs is not
 * NULL; rows of envs that did not finish are left untouched), the env is reset
 * at once, and row i of obs holds the FIRST observation of the next episode.
 * So obs can always be fed straight to the policy for the next step.
 *
 * Returns 0, or -1 with env_last_error() set (nothing stepped) when called
 * before vec_env_reset or when a discrete action is out of [0, n).
 * Never allocates. One thread at a time per vec_env. */
int vec_env_step(struct vec_env *v, const void *actions, float *obs, float *reward,
                 bool *terminated, bool *truncated, float *final_obs);

/* vec_env_step of envs first..first+n-1 only (the others wait): actions
 * and the outputs hold those n envs' rows (env first's first). Stepping
 * every env once in ranges is a vec_env_step of them all. -1 with
 * env_last_error() as vec_env_step, or for a range out of 0..num_envs-1. */
int vec_env_step_range(struct vec_env *v, int first, int n, const void *actions, float *obs, float *reward,
                       bool *terminated, bool *truncated, float *final_obs);
/* Statistics of the finished episodes; clear starts them again (the info
 * sums too). */
void vec_env_get_stats(const struct vec_env *v, struct vec_env_stats *out);
void vec_env_clear_stats(struct vec_env *v);

/* The spec's named per-step scalars (spec->info_count of them, 0 when it
 * has none): out[k] is the sum of info k over every step of the episodes
 * finished since creation or the last clear (divide by stats.length_sum
 * for the mean per step, by stats.episodes for the mean per episode).
 * Writes info_count doubles. */
void vec_env_info_sums(const struct vec_env *v, double *out);

/* In the four calls below, 0 <= i < num_envs (not checked). */

/* Return and length of env i's episode in progress. */
double vec_env_episode_return(const struct vec_env *v, int i);
int vec_env_episode_length(const struct vec_env *v, int i);

/* Return and length of env i's last finished episode: 0, or -1 if env i has
 * not finished one yet. */
int vec_env_last_episode(const struct vec_env *v, int i, double *ret, int *len);

/* The whole vec_env as bytes (for checkpoints): every env's state block and
 * RNG, elapsed steps, running and last episode returns/lengths, the
 * statistics and info sums. Env state blocks are copied raw, or through the
 * spec's save when it has one (a spec with create must). A new malloc'ed
 * buffer in *out (caller frees), its size in *len. Returns 0. */
int vec_env_save(const struct vec_env *v, unsigned char **out, size_t *len);
/* Restores what vec_env_save wrote for a vec_env of the same spec (id and
 * state size) and num_envs. Returns 0, or -1 with env_last_error() naming
 * the mismatch, an episode length out of range, or a number that is not
 * finite: a return ("env 4 of CartPole-v1: the return of its episode in
 * progress is inf"), the statistics' returns, or a value of an env's state
 * as the spec's get_state gives it ("env 3 of CartPole-v1: state[2]
 * (theta) is nan"; a built-in's values are named) (nothing changed then).
 * A state without get_state is the env's to trust. A spec with load reads
 * each env's saved form itself; every one is checked (in a scratch env the
 * spec creates) before any env changes, and a refusal names the env and
 * the load's message. */
int vec_env_load(struct vec_env *v, const unsigned char *buf, size_t len);

/* Env i's state block (spec->state_size bytes), e.g. for get/set_state. */
void *vec_env_state(struct vec_env *v, int i);

#ifdef __cplusplus
}
#endif
#endif
