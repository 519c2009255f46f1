/* tributary-train: the one-command path. Forks N observer processes on this
 * machine (the same binary, before rpc_init), becomes the agent (rank 0) on
 * a free loopback port, hands the port to the observers and trains. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "observer/observer.h"
#include "optim/dist_optim.h"
#include "rl/keys.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

#define PROG "tributary-train"

static int n_children;
static pid_t child_pid[RL_MAX_OBSERVERS];
static int child_fd[RL_MAX_OBSERVERS];
static struct rl_security sec;      /* --keys: the agent's and (forked) every observer's */

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

/* The observer child: wait for the agent's endpoint, then serve. */
static int child_main(int rank, int world, int heartbeat_timeout_ms, int fd)
{
    char ep[128];
    size_t got = 0;
    while (got < sizeof ep) {
        ssize_t r = read(fd, ep + got, sizeof ep - got);
        if (r <= 0) return 99;   /* the agent failed before listening */
        got += (size_t)r;
    }
    close(fd);
    ep[sizeof ep - 1] = '\0';
    char name[32];
    snprintf(name, sizeof name, "observer%d", rank);
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world, .master = ep,
                          .default_timeout_ms = 120000, .init_timeout_ms = 60000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = heartbeat_timeout_ms };
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    return observer_run(&o);
}

static void spawn_observers(int n, int heartbeat_timeout_ms)
{
    n_children = n;
    for (int i = 0; i < n; i++) {
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
            signal(SIGINT, SIG_IGN);   /* Ctrl-C reaches the agent, which stops everyone */
            close(p[1]);
            for (int j = 0; j < i; j++) close(child_fd[j]);
            int rc = child_main(i + 1, n + 1, heartbeat_timeout_ms, p[0]);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        close(p[0]);
        child_pid[i] = pid;
        child_fd[i] = p[1];
    }
}


/* Reaps every observer (killing any still alive after timeout_s); reports
 * those that did not exit 0 on stderr. Returns their number. */
static int reap_observers(double timeout_s)
{
    for (int k = 0; k < n_children; k++)
        if (child_fd[k] >= 0) {
            close(child_fd[k]);
            child_fd[k] = -1;
        }
    int bad = 0;
    double t0 = trib_now_s();
    for (int k = 0; k < n_children; k++) {
        int st = 0;
        for (;;) {
            pid_t r = waitpid(child_pid[k], &st, WNOHANG);
            if (r == child_pid[k]) break;
            if (r < 0 && errno != EINTR) {
                st = -1;
                break;
            }
            if (trib_now_s() - t0 > timeout_s) {
                kill(child_pid[k], SIGKILL);
                waitpid(child_pid[k], &st, 0);
                break;
            }
            usleep(2000);
        }
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            fprintf(stderr, PROG ": observer%d (pid %d) ", k + 1, (int)child_pid[k]);
            if (WIFEXITED(st)) fprintf(stderr, "exited with status %d\n", WEXITSTATUS(st));
            else fprintf(stderr, "was killed by signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
            bad++;
        }
    }
    return bad;
}

static const char about[] =
    "Usage: " PROG " [options]\n"
    "Trains a policy with an agent and N observer processes forked on this machine,\n"
    "talking over RPC on loopback (DESIGN.md 6). For observers on other hosts, start\n"
    "tributary-agent and tributary-observer yourself (or scripts/launch).\n"
    "Loopback needs no key; with --keys DIR the agent and its observers encrypt anyway.\n"
    "Progress lines go to stdout every --log-every seconds; the last line of stdout is a\n"
    "JSON summary (solved, env_steps, wall_s, sps, updates, lag_mean, ...).\n"
    "Exit status: 0 solved, 1 not solved within --max-steps/--max-seconds or a failure,\n"
    "2 bad usage, 130/143 interrupted by SIGINT/SIGTERM.\n";

int main(int argc, char **argv)
{
    struct rl_opt extra[2];
    int n_extra = rl_security_opts(&sec, PROG, extra);
    struct rl_config cfg;
    int rc = rl_config_parse(&cfg, PROG, about, argc, argv, extra, n_extra);
    if (rc >= 0) return rc;
    static const char *const loopback[] = { "tcp://127.0.0.1:0", NULL };
    if (rl_security_resolve(&sec, loopback) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    spawn_observers(cfg.observers, cfg.heartbeat_timeout_ms);
    agent_install_signals();
    dist_autograd_init();
    dist_optim_init();
    agent_register();
    struct rpc_opts o = agent_rpc_opts(&cfg, "tcp://127.0.0.1:0");
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    o.on_listening = hand_out;
    rc = agent_run(&cfg, &o);
    /* An observer that died was reported by the agent (and continued
     * without) and is reported here again with its exit status; the run's
     * status is the agent's. */
    reap_observers(30);
    return rc;
}
