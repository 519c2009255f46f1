/* tributary-train: the one-command path. Forks N observer processes on this
 * machine (the same binary, before rpc_init), becomes the agent (rank 0) on
 * a free loopback port, hands the port to the observers and trains. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent/agent.h"
#include "common/argv.h"
#include "common/proc.h"
#include "observer/observer.h"
#include "optim/dist_optim.h"
#include "rl/keys.h"
#include "rl/last_word.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

#define PROG "tributary-train"

static struct proc_group observers;
static struct rl_security sec;      /* --keys: the agent's and (forked) every observer's */

struct observer_args { int world, heartbeat_timeout_ms; };

/* An observer child: serves once the agent has handed it its endpoint. */
static int observer_main(int idx, const char *endpoint, void *arg)
{
    const struct observer_args *a = arg;
    char name[32];
    snprintf(name, sizeof name, "observer%d", idx + 1);
    struct rpc_opts o = { .name = name, .rank = idx + 1, .world_size = a->world, .master = endpoint,
                          .default_timeout_ms = 120000, .init_timeout_ms = 60000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = a->heartbeat_timeout_ms };
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    return observer_run(&o, false);   /* the agent speaks for the observers it forked */
}

static void spawn_observers(int n, int heartbeat_timeout_ms)
{
    /* The children run inside proc_fork, so this frame outlives their use of args. */
    struct observer_args args = { .world = n + 1, .heartbeat_timeout_ms = heartbeat_timeout_ms };
    proc_group_init(&observers);
    for (int i = 0; i < n; i++)
        if (proc_fork(&observers, observer_main, &args, PROC_IGNORE_SIGINT) < 0) {
            perror(PROG ": fork");
            exit(1);
        }
}

/* agent_watch_observers: whether observer `rank` (a child here) has ended,
 * and how; the child is left for reap_observers (WNOWAIT). */
static bool observer_ended(int rank, char *how, size_t cap, void *user)
{
    struct proc_group *g = user;
    int k = rank - 1;
    if (k < 0 || k >= g->n || g->p[k].reaped) return false;
    siginfo_t si = { 0 };
    if (waitid(P_PID, (id_t)g->p[k].pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return false;
    bool exited = si.si_code == CLD_EXITED;
    rl_describe_end(exited ? 0 : si.si_status, exited ? si.si_status : 0, how, cap);
    return true;
}

/* Reaps every observer (killing any still alive after timeout_s); reports
 * those that did not exit 0 on stderr. */
static void reap_observers(double timeout_s)
{
    proc_reap_all(&observers, timeout_s);
    for (int k = 0; k < observers.n; k++) {
        const struct proc *p = &observers.p[k];
        if (p->status == 0) continue;
        fprintf(stderr, PROG ": observer%d (pid %d) ", k + 1, (int)p->pid);
        if (p->sig) fprintf(stderr, "was killed by signal %d\n", p->sig);
        else fprintf(stderr, "exited with status %d\n", p->status);
    }
}

static const char about[] =
    "Usage: " PROG " [options]\n"
    "Trains a policy with an agent and N observer processes forked on this machine,\n"
    "talking over RPC on loopback (docs/design.md section 6). For observers on other hosts, start\n"
    "tributary-agent and tributary-observer yourself (or scripts/launch).\n"
    "Loopback needs no key; with --keys DIR the agent and its observers encrypt anyway.\n"
    "Progress lines go to stdout every --log-every seconds; the last line of stdout is a\n"
    "JSON summary (solved, outcome, env_steps, wall_s, sps, updates, lag_mean, ...).\n"
    "Exit status: 0 solved, or the budget (--max-steps/--max-updates/--max-seconds) spent\n"
    "without a target (--no-stop-at-target, an env with none: outcome \"completed\"); 1 a\n"
    "target missed within the budget (\"target-missed\") or a failure; 2 bad usage;\n"
    "130/143 interrupted by SIGINT/SIGTERM.\n";

int main(int argc, char **argv)
{
    struct argv_opt extra[2];
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
    spawn_observers(cfg.observers, cfg.heartbeat_timeout);
    agent_install_signals();
    dist_autograd_init();
    dist_optim_init();
    struct agent *a = agent_new(&cfg);
    if (a) agent_register(a);
    struct rpc_opts o = agent_rpc_opts(&cfg, "tcp://127.0.0.1:0");
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    o.on_listening = proc_hand_out_all;
    o.listening_user = &observers;
    agent_watch_observers(observer_ended, &observers);   /* a crash is seen at once, not at the heartbeat timeout */
    rc = a ? agent_run(a, &o) : 1;
    bool met = a && agent_rendezvous_done(a), gave_up = a && agent_gave_up(a);
    agent_free(a);
    if (!met) {
        /* The agent failed or was interrupted (and said so) before every
         * observer joined: they wait for an agent that is gone. */
        for (int k = 0; k < observers.n; k++)
            if (!observers.p[k].reaped) kill(observers.p[k].pid, SIGTERM);
        proc_reap_all(&observers, 5);
        return rc;
    }
    /* An observer that died was reported by the agent (and continued
     * without) and is reported here again with its exit status; the run's
     * status is the agent's. */
    reap_observers(gave_up ? 3 : 30);
    return rc;
}
