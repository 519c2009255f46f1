/* The environment contract: a spec (spaces, sizes, reset/step over a
 * caller-owned state block), the built-in classic-control envs by id, and the
 * small per-env RNG every env draws its reset distribution from. */
#ifndef TRIB_ENVS_ENV_H
#define TRIB_ENVS_ENV_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* The version of struct env_spec this header describes. Fields are only
 * ever appended, so a spec of ABI 1 (the fields up to set_state) is a prefix
 * of every later one. */
#define ENV_ABI_VERSION 2

/* The most named per-step scalars a spec may report (info_count). */
#define ENV_INFO_MAX 16

/* The largest saved form of one env a spec may declare (saved_size), in
 * bytes: 256 MiB, thousands of times a MuJoCo humanoid's. A checkpoint
 * holds it for every env of an observer, so a size past this could only
 * wrap or exhaust memory at the first checkpoint. */
#define ENV_SAVED_MAX ((size_t)1 << 28)

/* A plug-in's own arguments (`--env-arg key=value`, repeatable), in the
 * order given; keys are unique. n = 0 (keys/values NULL) when none. */
struct env_args {
    int n;
    const char *const *keys;
    const char *const *values;
};

/* The value of key in args, or NULL when it is absent (args may be NULL). */
static inline const char *env_args_get(const struct env_args *args, const char *key)
{
    for (int i = 0; args && i < args->n; i++)
        if (strcmp(args->keys[i], key) == 0) return args->values[i];
    return NULL;
}

/* The contract (docs/design.md section 3, envs/README.md "The contract").
 *
 * Threads and lifetime. A built-in's spec is made once per process, on its
 * first env_lookup; a plug-in's by its entry point at each
 * env_plugin_open_args (the model load: a program opens its env once for
 * the run, and its usage check may open and close it once before). A spec
 * is read-only from then on, so any number of threads may step envs of one
 * spec at once. Each env's state block belongs to one
 * vec_env, which one thread at a time uses: create runs when the vec_env is
 * made (on the thread calling vec_env_new, one env after another), reset and
 * step on the thread calling vec_env_reset/vec_env_step (an observer's
 * rollout thread), destroy when the vec_env is freed. step and reset must
 * not allocate, block, or touch state shared between envs.
 *
 * What is saved. A checkpoint holds every env's state block as bytes: the
 * raw block, or what save writes when the spec has it. Whatever a later
 * step reads must be in it, including a simulator's hidden state (MuJoCo's
 * qacc_warmstart, which its solver starts from, and the derived quantities
 * a step reads before it recomputes them), or a resumed run is not exact. */
struct env_spec {
    /* ---- ABI 1 ---- */
    const char *id;                 /* "CartPole-v1" */
    struct env_space obs, act;
    int max_episode_steps;          /* truncation; 0 = never truncated */
    double reward_threshold;        /* NAN when the env has none */
    size_t state_size;              /* bytes of one env's state block */
    /* Draw a fresh initial state from *rng (advancing it); write obs.dim floats. */
    void (*reset)(void *state, uint64_t *rng, float *obs);
    /* Advance one step: action is `const int *` or `const float *` (see above). */
    void (*step)(void *state, const void *action, float *obs,
                 float *reward, bool *terminated);
    /* optional: get/set the raw dynamic state (float64), for conformance
     * tests and for checking a resumed state. get_state writes at most cap
     * doubles and returns how many it has (a cap of 0 asks the size);
     * set_state returns 0, or -1 when n is wrong. A simulator's pair reads
     * and writes its generalised state (MuJoCo: [qpos..., qvel...]). */
    int  (*get_state)(const void *state, double *out, int cap);
    int  (*set_state)(void *state, const double *in, int n);

    /* ---- ABI 2 (every field below is optional: 0/NULL when unused) ---- */
    int abi_version;                /* ENV_ABI_VERSION in a spec of ABI 2 */
    void *model;                    /* what the spec loaded at open, shared by its envs
                                     * (MuJoCo: the mjModel); the env's own */
    /* Per-env resources. create runs on a zeroed state block before its
     * first reset; it returns 0, or -1 with a message in err (err_size
     * bytes, "") such as "mj_makeData failed", and then nothing is left to
     * destroy. destroy frees what create made. A spec with create must have
     * save and load: its state block holds pointers, so it cannot be saved
     * as raw bytes. */
    int  (*create)(const struct env_spec *spec, void *state, char *err, size_t err_size);
    void (*destroy)(const struct env_spec *spec, void *state);
    /* The saved form of one env (exactly saved_size bytes): save writes it,
     * load reads it back into a created env, checking it (0, or -1 with a
     * message in err and the env unchanged). */
    size_t saved_size;
    void (*save)(const struct env_spec *spec, const void *state, void *out);
    int  (*load)(const struct env_spec *spec, void *state, const void *in,
                 char *err, size_t err_size);
    /* Named per-step scalars, as Gymnasium's info ("x_velocity",
     * "reward_ctrl", ...): info writes the info_count values of the step
     * the env last took (after reset: what it reports then, usually 0). */
    int info_count;
    const char *const *info_names;
    void (*info)(const struct env_spec *spec, const void *state, double *out);
    /* Frees what the entry point loaded (the model, a spec it allocated);
     * called once, when the plug-in is closed. */
    void (*unload)(struct env_spec *spec);
};

/* The built-in envs by Gymnasium id: "CartPole-v1", "Acrobot-v1",
 * "MountainCar-v0", "Pendulum-v1", and when Tributary was built with MuJoCo
 * the v4 suite ("Hopper-v4", ...; env_mujoco_available()). A MuJoCo env's
 * model is loaded on its first lookup, so that lookup may fail ("Hopper-v4:
 * model: ..."). Returns a spec that lives until the process ends, or NULL
 * with env_last_error() naming the id when it is unknown. Thread-safe. */
const struct env_spec *env_lookup(const char *id);

/* Number of built-ins and the i-th one (0 <= i < env_builtin_count()); an i
 * out of range gives NULL with env_last_error() set. */
int env_builtin_count(void);
const struct env_spec *env_builtin(int i);

/* The id of built-in i without loading it (NULL when i is out of range). */
const char *env_builtin_id(int i);

/* 1 when the MuJoCo envs were built in, else 0 (then their ids are
 * refused with a message saying so). */
int env_mujoco_available(void);

/* Check that a spec is usable: id non-empty, state_size > 0, the observation
 * space a box of dim > 0 with low/high, a discrete action space with n > 0 or
 * a box one with dim > 0 and low/high (low <= high everywhere), reset and step
 * non-NULL, max_episode_steps >= 0; of ABI 2, abi_version right, create
 * only with save and load, save and load together with saved_size in
 * 1..ENV_SAVED_MAX,
 * info_count >= 0 with its names and info. Returns 0, or -1 with
 * env_last_error() saying what is wrong ("observation space has zero size"). */
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
/* Standard normal (mean 0, variance 1) by Box-Muller over two
 * env_rng_double draws (the first mapped to (0, 1] so the log is finite).
 * The distribution of NumPy's Generator.standard_normal, not its stream
 * (which is a ziggurat). Needs libm. */
static inline double env_rng_normal(uint64_t *rng)
{
    double u1 = 1.0 - env_rng_double(rng);   /* (0, 1] */
    double u2 = env_rng_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#ifdef __cplusplus
}
#endif
#endif
