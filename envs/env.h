/* The environment contract: a spec (spaces, sizes, reset/step over a
 * caller-owned state block), the built-in classic-control envs by id, and the
 * small per-env RNG every env draws its reset distribution from. */
#ifndef TRIB_ENVS_ENV_H
#define TRIB_ENVS_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Observations are always float32 vectors (a SPACE_BOX of `dim`). Actions are
 * either one `int` in [0, n) (SPACE_DISCRETE) or `float[dim]` (SPACE_BOX).
 * low/high point at `dim` doubles (box only; +-INFINITY allowed). */
struct env_space {
    enum { SPACE_DISCRETE, SPACE_BOX } kind;
    int n;
    int dim;
    const double *low, *high;
};

struct env_spec {
    const char *id;                 /* "CartPole-v1" */
    struct env_space obs, act;
    int max_episode_steps;          /* truncation; 0 = never truncated */
    double reward_threshold;        /* NAN when the env has none */
    size_t state_size;              /* bytes of one env's state */
    /* Draw a fresh initial state from *rng (advancing it); write obs.dim floats. */
    void (*reset)(void *state, uint64_t *rng, float *obs);
    /* Advance one step: action is `const int *` or `const float *` (see above). */
    void (*step)(void *state, const void *action, float *obs,
                 float *reward, bool *terminated);
    /* optional: get/set the raw dynamic state (float64) for conformance tests.
     * get_state writes at most cap doubles and returns how many it has (so a
     * cap of 0 asks the size); set_state returns 0, or -1 when n is wrong. */
    int  (*get_state)(const void *state, double *out, int cap);
    int  (*set_state)(void *state, const double *in, int n);
};

/* The built-in envs by Gymnasium id: "CartPole-v1", "Acrobot-v1",
 * "MountainCar-v0", "Pendulum-v1". Returns a static spec, or NULL with
 * env_last_error() naming the id when it is unknown. Thread-safe. */
const struct env_spec *env_lookup(const char *id);

/* Number of built-ins and the i-th one (0 <= i < env_builtin_count()); an i
 * out of range gives NULL with env_last_error() set. */
int env_builtin_count(void);
const struct env_spec *env_builtin(int i);

/* Check that a spec is usable: id non-empty, state_size > 0, the observation
 * space a box of dim > 0 with low/high, a discrete action space with n > 0 or
 * a box one with dim > 0 and low/high (low <= high everywhere), reset and step
 * non-NULL, max_episode_steps >= 0. Returns 0, or -1 with env_last_error()
 * saying what is wrong ("observation space has zero size"). */
int env_spec_check(const struct env_spec *spec);

/* The message of the last failed envs call on this thread ("" if none).
 * The pointer stays valid until the next envs call on this thread. */
const char *env_last_error(void);

/* ---- per-env RNG (splitmix64; header-only so plug-ins need no library) --- */

/* The starting RNG state of env `index` of a run seeded with `seed`:
 * different indices give independent streams, equal (seed, index) agree. */
static inline uint64_t env_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t env_rng_seed(uint64_t seed, uint64_t index)
{
    return env_rng_mix(seed + 0x9E3779B97F4A7C15ull * (index + 1)) ^ env_rng_mix(index);
}
/* Next 64 random bits. */
static inline uint64_t env_rng_next(uint64_t *rng)
{
    *rng += 0x9E3779B97F4A7C15ull;
    return env_rng_mix(*rng);
}
/* Uniform double in [0, 1) with 53 random bits. */
static inline double env_rng_double(uint64_t *rng)
{
    return (double)(env_rng_next(rng) >> 11) * 0x1.0p-53;
}
/* Uniform in [low, high), computed as NumPy's Generator.uniform does. */
static inline double env_rng_uniform(uint64_t *rng, double low, double high)
{
    return low + (high - low) * env_rng_double(rng);
}

#ifdef __cplusplus
}
#endif
#endif
