/* Faulty-v0, a plug-in env for test_rl_faults that behaves until one step
 * and then misbehaves as the environment variable TRIB_FAULT says:
 *   nan-obs, inf-obs    observation[1] becomes NaN / +Inf
 *   nan-reward          the reward becomes NaN
 *   hang                the step never returns (sleeps until killed)
 *   segv                the process crashes (SIGSEGV)
 *   none (or unset)     never
 * from the TRIB_FAULT_AT-th step of each env on (default 50; counted from
 * the env's creation, across episodes); or
 *   kill-reset          the process is killed (SIGKILL) at its first reset:
 *                       an observer's set-up
 *   segv-unload         the plug-in's unload crashes (SIGSEGV): wherever it
 *                       is closed, starting with the programs' check of --env. With TRIB_FAULT_ONCE=PATH only the
 * first process to get there misbehaves (the one that creates PATH), so
 * one observer of a tributary-train run fails and the others go on.
 * Otherwise a trivial task: 4 observations, 2 actions, reward 1 a step,
 * episodes of 20 steps. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envs/env.h"
#include "envs/plugin.h"

struct faulty {
    long steps;                     /* since the env's creation (reset does not clear it) */
    int t;                          /* in the episode */
};

static enum { NONE, NAN_OBS, INF_OBS, NAN_REWARD, HANG, SEGV, KILL_RESET, SEGV_UNLOAD } fault;
static long fault_at = 50;
static const char *fault_once;
static int chosen = -1;             /* with fault_once: 1 this process misbehaves, 0 not, -1 not known yet */

static bool faulty_here(void)
{
    if (!fault_once) return true;
    if (chosen < 0) {
        int fd = open(fault_once, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
        chosen = fd >= 0;
        if (fd >= 0) close(fd);
    }
    return chosen == 1;
}

static const double lo[4] = { -1, -1, -1, -1 }, hi[4] = { 1, 1, 1, 1 };

static void observe(const struct faulty *f, float *obs)
{
    obs[0] = (float)f->t / 20.0f;
    obs[1] = 0.5f;
    obs[2] = -0.5f;
    obs[3] = 0.0f;
}

static void f_reset(void *state, uint64_t *rng, float *obs)
{
    (void)rng;
    struct faulty *f = state;
    f->t = 0;
    observe(f, obs);
    if (fault == KILL_RESET && faulty_here()) raise(SIGKILL);
}

static void f_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    (void)action;
    struct faulty *f = state;
    f->steps++;
    f->t++;
    observe(f, obs);
    *reward = 1.0f;
    *terminated = f->t >= 20;
    if (f->steps < fault_at || fault == NONE || !faulty_here()) return;
    switch (fault) {
    case NAN_OBS: obs[1] = NAN; break;
    case INF_OBS: obs[1] = INFINITY; break;
    case NAN_REWARD: *reward = NAN; break;
    case HANG:
        for (;;) sleep(1);
    case SEGV:
        raise(SIGSEGV);
        break;
    case NONE:
    case KILL_RESET:
    case SEGV_UNLOAD: break;
    }
}

static void f_unload(struct env_spec *s)
{
    (void)s;
    if (fault == SEGV_UNLOAD) raise(SIGSEGV);
}

static const struct env_spec spec = {
    .id = "Faulty-v0",
    .obs = { .kind = SPACE_BOX, .dim = 4, .low = lo, .high = hi },
    .act = { .kind = SPACE_DISCRETE, .n = 2 },
    .max_episode_steps = 100,
    .reward_threshold = 1000,
    .state_size = sizeof(struct faulty),
    .reset = f_reset,
    .step = f_step,
    .abi_version = ENV_ABI_VERSION,
    .unload = f_unload,
};

__attribute__((visibility("default"))) const struct env_spec *tributary_env_open(const struct env_args *args, char *err,
                                                                                size_t cap)
{
    (void)args, (void)err, (void)cap;
    const char *f = getenv("TRIB_FAULT"), *at = getenv("TRIB_FAULT_AT");
    fault = !f ? NONE
            : strcmp(f, "nan-obs") == 0    ? NAN_OBS
            : strcmp(f, "inf-obs") == 0    ? INF_OBS
            : strcmp(f, "nan-reward") == 0 ? NAN_REWARD
            : strcmp(f, "hang") == 0       ? HANG
            : strcmp(f, "segv") == 0       ? SEGV
            : strcmp(f, "kill-reset") == 0 ? KILL_RESET
            : strcmp(f, "segv-unload") == 0 ? SEGV_UNLOAD
                                           : NONE;
    if (at) fault_at = atol(at);
    fault_once = getenv("TRIB_FAULT_ONCE");
    return &spec;
}
