/* tributary-train: the RL system's one-command entry point (DESIGN.md §6).
 * Forks N observer processes, becomes the agent (rank 0) and trains the
 * PyTorch RPC RL example's preset (REINFORCE on CartPole-v1) in sync mode. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envs/env.h"
#include "optim/optim.h"
#include "rpc/dist_autograd.h"
#include "rpc/rpc.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

#define PROG "tributary-train"
#define MAX_OBSERVERS 32
#define MAX_PARAMS 16
#define HIDDEN 128
#define DROPOUT 0.6f
#define LR 1e-2
#define GAMMA 0.99
#define RET_EPS 1e-8

struct config {
    int observers;
    bool async;
    uint64_t seed;
    int64_t max_iters;
    double target;
    int log_every;
    const char *env_id;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- agent state (rank 0) ----------------------------------------------- */

static struct {
    pthread_mutex_t mu;          /* one forward at a time: dropout's RNG and the sampler's */
    struct nn_module *policy;
    uint64_t sample_rng;
    int obs_dim, n_actions;
    /* async mode: the optimizer, counters and progress, all under mu */
    struct optim *opt;
    const struct config *cfg;
    int64_t version, updates, total_steps, log_steps, lag_sum, log_updates;
    double running, last_reward, t0, t_log;
    bool stop, solved, failed;
} A = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* select_action(obs f32 [1,obs_dim]) -> [log-prob f32 [1,1] (autograd-recorded), action int,
 * policy version].
 * Runs inside the caller's distributed-autograd context, so the log-prob's
 * graph reaches the policy's parameters through a recorded send. */
static int fn_select_action(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->list.len != 1 || args->list.items[0].kind != RPC_TENSOR)
        return rpc_request_fail(req, "select_action: expected (obs tensor [1,%d])", A.obs_dim);
    struct tensor *obs = args->list.items[0].tensor;
    if (obs->dtype != DTYPE_F32 || obs->ndim != 2 || obs->shape[0] != 1 || obs->shape[1] != A.obs_dim)
        return rpc_request_fail(req, "select_action: obs must be f32 [1,%d]", A.obs_dim);
    pthread_mutex_lock(&A.mu);
    struct tensor *logits = nn_forward1(A.policy, obs);
    struct tensor *act = logits ? tensor_categorical_sample(logits, &A.sample_rng) : NULL;
    int64_t version = A.version;
    pthread_mutex_unlock(&A.mu);
    if (!act) {
        tensor_free(logits);
        return rpc_request_fail(req, "select_action: %s", tensor_last_error());
    }
    int64_t ishape[2] = { 1, 1 };
    struct tensor *logp_all = tensor_log_softmax(logits);
    struct tensor *idx = logp_all ? tensor_reshape(act, 2, ishape) : NULL;
    struct tensor *logp = idx ? tensor_gather(logp_all, idx) : NULL;
    int64_t action = *(const int64_t *)tensor_data(act);
    tensor_free(idx);
    tensor_free(logp_all);
    tensor_free(act);
    tensor_free(logits);
    if (!logp) return rpc_request_fail(req, "select_action: %s", tensor_last_error());
    *res = rpc_list(3);
    res->list.items[0] = rpc_tensor(logp);
    res->list.items[1] = rpc_int(action);
    res->list.items[2] = rpc_int(version);
    tensor_free(logp);
    return 0;
}

/* ---- observer state (ranks 1..N) ---------------------------------------- */

static struct {
    pthread_mutex_t mu;          /* one episode at a time */
    const struct env_spec *spec;
    void *env;
    uint64_t rng;
    int max_steps;
    float *obs;
    float *rewards;
    float *ret;
    struct tensor **logps;
} O = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Frees the log-probs of an episode (n of them). */
static void free_logps(int n)
{
    for (int i = 0; i < n; i++) {
        tensor_free(O.logps[i]);
        O.logps[i] = NULL;
    }
}

/* Runs one episode (caller holds O.mu; the caller's current context, if
 * any, records the agent's forwards). Returns the REINFORCE loss
 * -sum(logp_t * normalised return_t) as a new reference and writes the
 * episode reward, steps and the policy version of the first forward; NULL
 * with a message in err. */
static struct tensor *episode(double *ep_reward, int *steps, int64_t *version0, char *err, size_t cap)
{
    const int obs_dim = O.spec->obs.dim;
    int64_t oshape[2] = { 1, obs_dim };
    O.spec->reset(O.env, &O.rng, O.obs);
    int n = 0;
    *ep_reward = 0;
    *version0 = -1;
    err[0] = '\0';
    while (n < O.max_steps) {
        struct tensor *ot = tensor_from_f32(2, oshape, O.obs);
        struct rpc_value a = rpc_list(1), r = rpc_nil();
        a.list.items[0] = rpc_tensor(ot);
        tensor_free(ot);
        int rc = rpc_sync("agent", "select_action", &a, &r, 0);
        rpc_value_clear(&a);
        if (rc != 0) {
            snprintf(err, cap, "%s", rpc_last_error());
            break;
        }
        if (r.kind != RPC_LIST || r.list.len != 3 || r.list.items[0].kind != RPC_TENSOR ||
            r.list.items[1].kind != RPC_INT || r.list.items[1].i < 0 || r.list.items[1].i >= O.spec->act.n ||
            r.list.items[2].kind != RPC_INT) {
            rpc_value_clear(&r);
            snprintf(err, cap, "select_action returned a malformed result");
            break;
        }
        O.logps[n] = tensor_retain(r.list.items[0].tensor);
        int action = (int)r.list.items[1].i;
        if (n == 0) *version0 = r.list.items[2].i;
        rpc_value_clear(&r);
        float reward = 0;
        bool terminated = false;
        O.spec->step(O.env, &action, O.obs, &reward, &terminated);
        O.rewards[n++] = reward;
        *ep_reward += reward;
        if (terminated) break;
    }
    if (err[0]) {
        free_logps(n);
        return NULL;
    }
    /* discounted returns, normalised by mean and (unbiased) std + eps, as the example */
    double R = 0, mean = 0, var = 0;
    for (int t = n - 1; t >= 0; t--) {
        R = O.rewards[t] + GAMMA * R;
        O.ret[t] = (float)R;
        mean += R;
    }
    mean /= n;
    for (int t = 0; t < n; t++) var += (O.ret[t] - mean) * (O.ret[t] - mean);
    double sd = n > 1 ? sqrt(var / (n - 1)) : 0.0;
    for (int t = 0; t < n; t++) O.ret[t] = (float)(-(O.ret[t] - mean) / (sd + RET_EPS));
    int64_t rshape[2] = { n, 1 };
    struct tensor *lp = tensor_cat(n, O.logps, 0);
    struct tensor *w = tensor_from_f32(2, rshape, O.ret);
    struct tensor *prod = lp ? tensor_mul(lp, w) : NULL;
    struct tensor *loss = prod ? tensor_sum(prod) : NULL;
    tensor_free(prod);
    tensor_free(w);
    tensor_free(lp);
    free_logps(n);
    if (!loss) snprintf(err, cap, "loss: %s", tensor_last_error());
    *steps = n;
    return loss;
}

/* run_episode() -> [loss f32 scalar (autograd-recorded), episode reward, steps]
 * (sync mode: runs inside the agent's context). */
static int fn_run_episode(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->list.len != 0) return rpc_request_fail(req, "run_episode: expected no arguments");
    char err[512];
    double ep_reward = 0;
    int steps = 0;
    int64_t v0 = -1;
    pthread_mutex_lock(&O.mu);
    struct tensor *loss = episode(&ep_reward, &steps, &v0, err, sizeof err);
    pthread_mutex_unlock(&O.mu);
    if (!loss) return rpc_request_fail(req, "run_episode: %s", err);
    *res = rpc_list(3);
    res->list.items[0] = rpc_tensor(loss);
    res->list.items[1] = rpc_double(ep_reward);
    res->list.items[2] = rpc_int(steps);
    tensor_free(loss);
    return 0;
}

/* run_async() -> nil (async mode): loops on its own until the agent says
 * stop: a context, one episode, backward (the gradient reaches the agent's
 * parameters), then the agent's "update" steps the policy with it. */
static int fn_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    (void)res;
    if (args->list.len != 0) return rpc_request_fail(req, "run_async: expected no arguments");
    char err[512] = "";
    bool stop = false;
    pthread_mutex_lock(&O.mu);
    while (!stop && !err[0]) {
        int64_t ctx = dist_autograd_context_new();
        if (ctx < 0) {
            snprintf(err, sizeof err, "context: %s", rpc_last_error());
            break;
        }
        double ep_reward = 0;
        int steps = 0;
        int64_t v0 = -1;
        struct tensor *loss = episode(&ep_reward, &steps, &v0, err, sizeof err);
        if (loss && dist_autograd_backward(ctx, 1, &loss, false) != 0)
            snprintf(err, sizeof err, "backward: %s", rpc_last_error());
        if (loss && !err[0]) {
            struct rpc_value a = rpc_list(4), r = rpc_nil();
            a.list.items[0] = rpc_int(ctx);
            a.list.items[1] = rpc_double(ep_reward);
            a.list.items[2] = rpc_int(steps);
            a.list.items[3] = rpc_int(v0);
            if (rpc_sync("agent", "update", &a, &r, 0) != 0) snprintf(err, sizeof err, "update: %s", rpc_last_error());
            else if (r.kind != RPC_BOOL) snprintf(err, sizeof err, "update returned a malformed result");
            else stop = r.b;
            rpc_value_clear(&a);
            rpc_value_clear(&r);
        }
        tensor_free(loss);
        if (dist_autograd_release(ctx) != 0 && !err[0]) snprintf(err, sizeof err, "release: %s", rpc_last_error());
    }
    pthread_mutex_unlock(&O.mu);
    if (err[0]) return rpc_request_fail(req, "run_async: %s", err);
    return 0;
}

/* ---- processes ------------------------------------------------------------ */

static int n_children;
static pid_t child_pid[MAX_OBSERVERS];
static int child_fd[MAX_OBSERVERS];

static struct rpc_opts world_opts(const char *name, int rank, int world, const char *master)
{
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world, .master = master,
                          .default_timeout_ms = 120000, .init_timeout_ms = 30000,
                          .heartbeat_ms = 200, .heartbeat_timeout_ms = 15000 };
    return o;
}

static void hand_out(const char *endpoint, void *user)
{
    (void)user;
    char ep[128] = { 0 };
    snprintf(ep, sizeof ep, "%s", endpoint);
    for (int k = 0; k < n_children; k++) {
        if (child_fd[k] < 0) continue;
        ssize_t w = write(child_fd[k], ep, sizeof ep);
        (void)w;
        close(child_fd[k]);
        child_fd[k] = -1;
    }
}

/* Observer process body: env, rpc_init as rank `rank`, serve until the agent shuts down. */
static int observer_main(const struct config *cfg, int rank, const char *master)
{
    O.spec = env_lookup(cfg->env_id);
    if (!O.spec) {
        fprintf(stderr, PROG ": observer%d: %s\n", rank, env_last_error());
        return 1;
    }
    O.max_steps = O.spec->max_episode_steps > 0 ? O.spec->max_episode_steps : 500;
    O.env = calloc(1, O.spec->state_size);
    O.obs = calloc((size_t)O.spec->obs.dim, sizeof *O.obs);
    O.rewards = calloc((size_t)O.max_steps, sizeof *O.rewards);
    O.ret = calloc((size_t)O.max_steps, sizeof *O.ret);
    O.logps = calloc((size_t)O.max_steps, sizeof *O.logps);
    if (!O.env || !O.obs || !O.rewards || !O.ret || !O.logps) {
        fprintf(stderr, PROG ": observer%d: out of memory\n", rank);
        return 1;
    }
    O.rng = env_rng_seed(cfg->seed, (uint64_t)rank);
    char name[32];
    snprintf(name, sizeof name, "observer%d", rank);
    struct rpc_opts o = world_opts(name, rank, cfg->observers + 1, master);
    int rc = 0;
    if (rpc_init(&o) < 0) {
        fprintf(stderr, PROG ": %s: rpc_init: %s\n", name, rpc_last_error());
        rc = 1;
    } else {
        rpc_shutdown(true);
    }
    free(O.env);
    free(O.obs);
    free(O.rewards);
    free(O.ret);
    free(O.logps);
    return rc;
}

static void spawn_observers(const struct config *cfg)
{
    n_children = cfg->observers;
    for (int i = 0; i < n_children; i++) {
        int p[2];
        if (pipe(p) != 0) {
            perror(PROG ": pipe");
            exit(1);
        }
        fflush(stdout);
        fflush(stderr);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
            perror(PROG ": fork");
            exit(1);
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(1);
            close(p[1]);
            for (int j = 0; j < i; j++) close(child_fd[j]);
            char ep[128];
            size_t got = 0;
            while (got < sizeof ep) {
                ssize_t r = read(p[0], ep + got, sizeof ep - got);
                if (r <= 0) _exit(99);   /* the agent failed before listening */
                got += (size_t)r;
            }
            close(p[0]);
            ep[sizeof ep - 1] = '\0';
            int rc = observer_main(cfg, i + 1, ep);
            fflush(stdout);
            fflush(stderr);
            exit(rc);
        }
        close(p[0]);
        child_pid[i] = pid;
        child_fd[i] = p[1];
    }
}

/* Closes unsent pipes and reaps every observer (killing any still alive
 * after timeout_s). Returns the number that did not exit 0. */
static int reap_observers(double timeout_s)
{
    for (int k = 0; k < n_children; k++)
        if (child_fd[k] >= 0) { close(child_fd[k]); child_fd[k] = -1; }
    int bad = 0;
    double t0 = now_s();
    for (int k = 0; k < n_children; k++) {
        int st = 0;
        for (;;) {
            pid_t r = waitpid(child_pid[k], &st, WNOHANG);
            if (r == child_pid[k]) break;
            if (r < 0 && errno != EINTR) { st = -1; break; }
            if (now_s() - t0 > timeout_s) {
                kill(child_pid[k], SIGKILL);
                waitpid(child_pid[k], &st, 0);
                break;
            }
            usleep(2000);
        }
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            fprintf(stderr, PROG ": observer%d ", k + 1);
            if (WIFEXITED(st)) fprintf(stderr, "exited with %d\n", WEXITSTATUS(st));
            else fprintf(stderr, "was killed by signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
            bad++;
        }
    }
    return bad;
}

/* ---- sync training loop --------------------------------------------------- */

/* One iteration: a context, run_episode on every observer, one backward, one
 * optimizer step. Writes the smallest episode reward of the observers (what
 * PyTorch's RPC RL example feeds its running reward) and the steps taken.
 * 0 or -1. */
static int sync_iteration(const struct config *cfg, struct optim *opt, double *min_reward, int64_t *steps)
{
    struct rpc_future *f[MAX_OBSERVERS];
    struct tensor *losses[MAX_OBSERVERS] = { 0 };
    int64_t ctx = dist_autograd_context_new();
    if (ctx < 0) {
        fprintf(stderr, PROG ": dist_autograd_context_new: %s\n", rpc_last_error());
        return -1;
    }
    for (int k = 0; k < cfg->observers; k++) {
        char name[32];
        snprintf(name, sizeof name, "observer%d", k + 1);
        struct rpc_value a = rpc_list(0);
        f[k] = rpc_async(name, "run_episode", &a, 0);
        rpc_value_clear(&a);
    }
    int rc = 0;
    double least = INFINITY;
    *steps = 0;
    for (int k = 0; k < cfg->observers; k++) {
        struct rpc_value r = rpc_nil();
        if (rpc_future_wait(f[k], &r) != 0) {
            if (rc == 0) fprintf(stderr, PROG ": observer%d: %s\n", k + 1, rpc_last_error());
            rc = -1;
        } else if (r.kind != RPC_LIST || r.list.len != 3 || r.list.items[0].kind != RPC_TENSOR ||
                   r.list.items[1].kind != RPC_DOUBLE || r.list.items[2].kind != RPC_INT) {
            if (rc == 0) fprintf(stderr, PROG ": observer%d: malformed run_episode result\n", k + 1);
            rc = -1;
        } else {
            losses[k] = tensor_retain(r.list.items[0].tensor);
            least = fmin(least, r.list.items[1].d);
            *steps += r.list.items[2].i;
        }
        rpc_value_clear(&r);
        rpc_future_free(f[k]);
    }
    if (rc == 0 && dist_autograd_backward(ctx, cfg->observers, losses, false) != 0) {
        fprintf(stderr, PROG ": backward: %s\n", rpc_last_error());
        rc = -1;
    }
    if (rc == 0) {
        struct nn_module *m = A.policy;
        struct tensor *grads[MAX_PARAMS] = { 0 };
        for (int i = 0; i < m->n_params; i++) grads[i] = dist_autograd_get_gradient(ctx, m->params[i]);
        if (optim_step(opt, grads) != 0) {
            fprintf(stderr, PROG ": optim_step: %s\n", optim_last_error());
            rc = -1;
        }
        for (int i = 0; i < m->n_params; i++) tensor_free(grads[i]);
    }
    for (int k = 0; k < cfg->observers; k++) tensor_free(losses[k]);
    if (dist_autograd_release(ctx) != 0 && rc == 0) {
        fprintf(stderr, PROG ": release: %s\n", rpc_last_error());
        rc = -1;
    }
    *min_reward = least;
    return rc;
}

/* update(ctx, episode reward, steps, version at the episode's first
 * forward) -> stop? (async mode; called by an observer after its backward):
 * steps the policy with ctx's gradients here, counts, logs. */
static int fn_update(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->list.len != 4 || args->list.items[0].kind != RPC_INT || args->list.items[1].kind != RPC_DOUBLE ||
        args->list.items[2].kind != RPC_INT || args->list.items[3].kind != RPC_INT)
        return rpc_request_fail(req, "update: expected (ctx, reward, steps, version)");
    int64_t ctx = args->list.items[0].i;
    double reward = args->list.items[1].d;
    pthread_mutex_lock(&A.mu);
    if (A.stop || !A.opt) {
        *res = rpc_bool(true);
        pthread_mutex_unlock(&A.mu);
        return 0;
    }
    struct nn_module *m = A.policy;
    struct tensor *grads[MAX_PARAMS] = { 0 };
    for (int i = 0; i < m->n_params; i++) grads[i] = dist_autograd_get_gradient(ctx, m->params[i]);
    int rc = optim_step(A.opt, grads);
    for (int i = 0; i < m->n_params; i++) tensor_free(grads[i]);
    if (rc != 0) {
        A.stop = A.failed = true;
        pthread_mutex_unlock(&A.mu);
        return rpc_request_fail(req, "update: optim_step: %s", optim_last_error());
    }
    int64_t lag = A.version - args->list.items[3].i;
    A.version++;
    A.updates++;
    A.total_steps += args->list.items[2].i;
    A.log_steps += args->list.items[2].i;
    A.lag_sum += lag;
    A.log_updates++;
    A.last_reward = reward;
    A.running = 0.05 * reward + 0.95 * A.running;
    A.solved = A.running > A.cfg->target;
    if (A.updates % A.cfg->log_every == 0 || A.solved || A.updates == A.cfg->max_iters) {
        double t = now_s();
        printf("iter %6" PRId64 "  steps/s %8.0f  last_reward %6.1f  running_reward %7.2f  version %" PRId64
               "  lag %.2f\n",
               A.updates, A.log_steps / fmax(t - A.t_log, 1e-9), reward, A.running, A.version,
               (double)A.lag_sum / (double)A.log_updates);
        A.t_log = t;
        A.log_steps = A.lag_sum = A.log_updates = 0;
    }
    if (A.solved || A.updates >= A.cfg->max_iters) A.stop = true;
    *res = rpc_bool(A.stop);
    pthread_mutex_unlock(&A.mu);
    return 0;
}

/* Async mode: every observer loops on its own (run_async) until update says
 * stop. Returns 0 or -1. */
static int async_train(const struct config *cfg)
{
    struct rpc_future *f[MAX_OBSERVERS];
    for (int k = 0; k < cfg->observers; k++) {
        char name[32];
        snprintf(name, sizeof name, "observer%d", k + 1);
        struct rpc_value a = rpc_list(0);
        f[k] = rpc_async(name, "run_async", &a, -1);
        rpc_value_clear(&a);
    }
    int rc = 0;
    for (int k = 0; k < cfg->observers; k++) {
        if (rpc_future_wait(f[k], NULL) != 0) {
            if (rc == 0) fprintf(stderr, PROG ": observer%d: %s\n", k + 1, rpc_last_error());
            pthread_mutex_lock(&A.mu);
            A.stop = true;   /* the others stop at their next update */
            pthread_mutex_unlock(&A.mu);
            rc = -1;
        }
        rpc_future_free(f[k]);
    }
    return rc;
}

/* Returns the process exit code: 0 solved, 1 not solved or failed. */
static int agent_main(const struct config *cfg)
{
    const struct env_spec *spec = env_lookup(cfg->env_id);
    if (!spec) {
        fprintf(stderr, PROG ": %s\n", env_last_error());
        return 1;
    }
    A.obs_dim = spec->obs.dim;
    A.n_actions = spec->act.n;
    uint64_t init_rng = cfg->seed;
    int sizes[3] = { A.obs_dim, HIDDEN, A.n_actions };
    A.policy = nn_mlp_new(3, sizes, NN_RELU, DROPOUT, &init_rng);
    if (!A.policy) {
        fprintf(stderr, PROG ": policy: %s\n", tensor_last_error());
        return 1;
    }
    if (A.policy->n_params > MAX_PARAMS) {
        fprintf(stderr, PROG ": policy has %d parameters, at most %d supported\n", A.policy->n_params, MAX_PARAMS);
        nn_module_free(A.policy);
        return 1;
    }
    A.policy->training = true;
    A.policy->rng = env_rng_seed(cfg->seed, 1000);
    A.sample_rng = env_rng_seed(cfg->seed, 1001);
    struct optim_hyper h = optim_defaults(OPTIM_ADAM);
    h.lr = LR;
    struct optim *opt = optim_new(OPTIM_ADAM, &h, A.policy->n_params, A.policy->params);
    if (!opt) {
        fprintf(stderr, PROG ": optim_new: %s\n", optim_last_error());
        nn_module_free(A.policy);
        return 1;
    }
    printf(PROG ": %s REINFORCE on %s, %d observers, seed %" PRIu64 ", target running reward %.1f\n",
           cfg->async ? "async" : "sync", cfg->env_id, cfg->observers, cfg->seed, cfg->target);
    double running = 0, t0 = now_s(), t_log = t0;
    int64_t total_steps = 0, log_steps = 0, version = 0, iters = 0;
    bool solved = false, failed = false;
    if (cfg->async) {
        pthread_mutex_lock(&A.mu);
        A.cfg = cfg;
        A.t0 = A.t_log = t0;
        A.opt = opt;
        pthread_mutex_unlock(&A.mu);
        failed = async_train(cfg) != 0;
        pthread_mutex_lock(&A.mu);
        A.opt = NULL;
        failed = failed || A.failed;
        solved = A.solved;
        running = A.running;
        iters = A.updates;
        total_steps = A.total_steps;
        pthread_mutex_unlock(&A.mu);
    }
    for (int64_t it = 1; !cfg->async && it <= cfg->max_iters; it++) {
        double least = 0;
        int64_t steps = 0;
        if (sync_iteration(cfg, opt, &least, &steps) != 0) {
            failed = true;
            break;
        }
        version++;
        iters = it;
        total_steps += steps;
        log_steps += steps;
        running = 0.05 * least + 0.95 * running;
        solved = running > cfg->target;
        if (it % cfg->log_every == 0 || solved || it == cfg->max_iters) {
            double t = now_s();
            printf("iter %6" PRId64 "  steps/s %8.0f  last_reward %6.1f  running_reward %7.2f  version %" PRId64 "\n",
                   it, log_steps / fmax(t - t_log, 1e-9), least, running, version);
            t_log = t;
            log_steps = 0;
        }
        if (solved) break;
    }
    if (solved)
        printf(PROG ": solved: running reward %.2f > %.1f after %" PRId64 " iterations, %" PRId64
               " env steps, %.1f s\n", running, cfg->target, iters, total_steps, now_s() - t0);
    else if (!failed)
        printf(PROG ": not solved: running reward %.2f <= %.1f after %" PRId64 " iterations (%.1f s)\n", running,
               cfg->target, iters, now_s() - t0);
    optim_free(opt);
    nn_module_free(A.policy);
    A.policy = NULL;
    return solved ? 0 : 1;
}

/* ---- command line --------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [options]\n"
            "Trains a policy with an agent and N observer processes over RPC (DESIGN.md 6).\n"
            "Preset: PyTorch's RPC RL example (REINFORCE on CartPole-v1, one env per observer,\n"
            "Linear 4-128, dropout 0.6, ReLU, Linear 128-2, Adam lr 1e-2, gamma 0.99).\n"
            "\n"
            "  --observers N   observer processes (1..%d, default 4)\n"
            "  --mode MODE     sync (default): each iteration the agent runs one episode on\n"
            "                  every observer in one context, one backward, one step;\n"
            "                  async: observers loop on their own, one update per episode\n"
            "                  (an iteration is then one update; lag is reported)\n"
            "  --seed S        seed of the policy, sampling and envs (default 1); runs are\n"
            "                  not reproducible yet (observers interleave on the sampler)\n"
            "  --max-iters N   stop after N iterations (default 2000)\n"
            "  --target R      solved when the running reward exceeds R (default 475);\n"
            "                  running = 0.05 * reward + 0.95 * running, where reward is\n"
            "                  the smallest episode reward of the iteration (sync, as the\n"
            "                  PyTorch example) or the episode's reward (async)\n"
            "  --log-every N   print a progress line every N iterations (default 10)\n"
            "  --help          this text\n"
            "\n"
            "Exit status: 0 solved, 1 not solved within --max-iters or a failure, 2 bad usage.\n",
            MAX_OBSERVERS);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " PROG " --help)\n");
    return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Fills cfg from argv. Returns -1 to go on, or an exit code (0 help, 2 bad usage). */
static int parse_args(int argc, char **argv, struct config *cfg)
{
    static const struct option longopts[] = {
        { "observers", required_argument, NULL, 'n' }, { "mode", required_argument, NULL, 'm' },
        { "seed", required_argument, NULL, 's' },      { "max-iters", required_argument, NULL, 'i' },
        { "target", required_argument, NULL, 't' },    { "log-every", required_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },            { NULL, 0, NULL, 0 },
    };
    *cfg = (struct config){ .observers = 4, .seed = 1, .max_iters = 2000, .target = 475.0, .log_every = 10,
                            .env_id = "CartPole-v1" };
    opterr = 0;
    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!parse_i64(optarg, 1, MAX_OBSERVERS, &v)) return bad_usage("--observers must be an integer in 1..32, not '%s'", optarg);
            cfg->observers = (int)v;
            break;
        case 'm':
            if (strcmp(optarg, "sync") == 0) cfg->async = false;
            else if (strcmp(optarg, "async") == 0) cfg->async = true;
            else return bad_usage("--mode must be sync or async, not '%s'", optarg);
            break;
        case 's':
            if (!parse_i64(optarg, 0, INT64_MAX, &v)) return bad_usage("--seed must be a non-negative integer, not '%s'", optarg);
            cfg->seed = (uint64_t)v;
            break;
        case 'i':
            if (!parse_i64(optarg, 1, INT64_MAX, &v)) return bad_usage("--max-iters must be a positive integer, not '%s'", optarg);
            cfg->max_iters = v;
            break;
        case 't': {
            char *end = NULL;
            errno = 0;
            double d = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(d)) return bad_usage("--target must be a number, not '%s'", optarg);
            cfg->target = d;
            break;
        }
        case 'l':
            if (!parse_i64(optarg, 1, INT32_MAX, &v)) return bad_usage("--log-every must be a positive integer, not '%s'", optarg);
            cfg->log_every = (int)v;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return bad_usage("option '%s' needs a value", argv[optind - 1]);
        default:
            return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return bad_usage("unexpected argument '%s'", argv[optind]);
    return -1;
}

int main(int argc, char **argv)
{
    struct config cfg;
    int rc = parse_args(argc, argv, &cfg);
    if (rc >= 0) return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    dist_autograd_init();
    rpc_register("select_action", fn_select_action, NULL);
    rpc_register("run_episode", fn_run_episode, NULL);
    rpc_register("run_async", fn_run_async, NULL);
    rpc_register("update", fn_update, NULL);
    spawn_observers(&cfg);
    struct rpc_opts o = world_opts("agent", 0, cfg.observers + 1, "tcp://127.0.0.1:0");
    o.on_listening = hand_out;
    if (rpc_init(&o) < 0) {
        fprintf(stderr, PROG ": agent: rpc_init: %s\n", rpc_last_error());
        reap_observers(10);
        return 1;
    }
    rc = agent_main(&cfg);
    rpc_shutdown(true);
    if (reap_observers(60) != 0 && rc == 0) rc = 1;
    return rc;
}
