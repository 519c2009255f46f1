/* tributary-observer: one observer process joining an agent, on this host
 * or another. The agent hands it the run's configuration at setup. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/argv.h"
#include "observer/observer.h"
#include "rl/keys.h"
#include "rl/rl.h"

#define PROG "tributary-observer"

static const char about[] =
    "Usage: " PROG " [options]\n"
    "       " PROG " --make-keys DIR   (as tributary-agent --make-keys DIR)\n"
    "Joins the agent's world as one observer and serves it until training ends.\n"
    "The env, sizes and algorithm come from the agent (tributary-agent --help).\n"
    "To rejoin a running job after an observer was lost, start one with its --rank.\n"
    "Exit status: 0 when the agent ends training, 1 when it is lost or joining fails,\n"
    "2 bad usage.\n\n";

/* What the command line (and the environment) say. */
struct args {
    const char *master, *name, *bind_host;
    int rank, world, hb;
    struct rl_security sec;
    char defname[32], env_master[256];
};

static int set_master(void *u, const char *v)
{
    if (strncmp(v, "tcp://", 6) != 0) return argv_set_error("--master must look like tcp://HOST:PORT, not '%s'", v);
    ((struct args *)u)->master = v;
    return 0;
}

static int set_rank(void *u, const char *v)
{
    long x;
    if (argv_long("rank", v, 1, 65535, &x) != 0) return -1;
    ((struct args *)u)->rank = (int)x;
    return 0;
}

static int set_world(void *u, const char *v)
{
    long x;
    if (argv_long("world-size", v, 2, 65536, &x) != 0) return argv_set_error("--world-size must be an integer >= 2, not '%s'", v);
    ((struct args *)u)->world = (int)x;
    return 0;
}

static int set_name(void *u, const char *v)
{
    if (strlen(v) == 0 || strlen(v) >= 64) return argv_set_error("--name must have 1..63 characters, not '%s'", v);
    ((struct args *)u)->name = v;
    return 0;
}

static int set_bind(void *u, const char *v)
{
    ((struct args *)u)->bind_host = v;
    return 0;
}

static int set_hb(void *u, const char *v)
{
    long x;
    if (argv_long("heartbeat-timeout", v, 100, 3600000, &x) != 0)
        return argv_set_error("--heartbeat-timeout must be in 100..3600000, not '%s'", v);
    ((struct args *)u)->hb = (int)x;
    return 0;
}

/* The command line into a. 0, or the exit status (after --help or a bad usage). */
static int parse(struct args *a, int argc, char **argv)
{
    struct argv_opt opts[8] = {
        { .name = "master", .arg = "tcp://H:P", .set = set_master, .user = a,
          .help = "the agent's rendezvous (default: MASTER_ADDR/MASTER_PORT, else\ntcp://127.0.0.1:29500, the agent's default)" },
        { .name = "rank", .arg = "R", .set = set_rank, .user = a,
          .help = "this observer's rank, 1..N (default: RANK or SLURM_PROCID)" },
        { .name = "world-size", .arg = "W", .set = set_world, .user = a,
          .help = "N observers + 1 (default: WORLD_SIZE or SLURM_NTASKS)" },
        { .name = "name", .arg = "NAME", .set = set_name, .user = a, .help = "worker name (default: observer<rank>)" },
        { .name = "bind-host", .arg = "IP", .set = set_bind, .user = a,
          .help = "the interface to listen on for peers (default 127.0.0.1;\nuse this host's address when the agent is elsewhere)" },
        { .name = "heartbeat-timeout", .arg = "MS", .set = set_hb, .user = a,
          .help = "silence after which the agent counts as dead (default 15000)" },
    };
    int n = 6 + rl_security_opts(&a->sec, PROG, &opts[6]);
    int rc = argv_parse(PROG, about, opts, n, argc, argv);
    return rc == 1 ? 0 : rc == 2 ? 2 : -1;
}

static int bad(const char *what, const char *v)
{
    fprintf(stderr, PROG ": %s, not '%s' (see " PROG " --help)\n", what, v);
    return 2;
}

/* What the command line left out: the rank from RANK or SLURM_PROCID, the
 * name, the master from MASTER_ADDR/MASTER_PORT (as tributary-agent picks
 * its own, else 127.0.0.1:29500). 0, or 2 after printing why. */
static int defaults(struct args *a)
{
    if (a->rank == RPC_RANK_ENV) {
        const char *r = getenv("RANK");
        if (!r) r = getenv("SLURM_PROCID");
        long x;
        if (!r || argv_long("rank", r, 1, 65535, &x) != 0) return bad("give --rank (or RANK / SLURM_PROCID) in 1..N", r ? r : "(unset)");
        a->rank = (int)x;
    }
    if (!a->name) {
        snprintf(a->defname, sizeof a->defname, "observer%d", a->rank);
        a->name = a->defname;
    }
    if (!a->master) {
        const char *h = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        snprintf(a->env_master, sizeof a->env_master, "tcp://%s:%s", h && *h ? h : "127.0.0.1", p && *p ? p : "29500");
        a->master = a->env_master;
    }
    const char *addrs[] = { a->master, a->bind_host ? a->bind_host : "127.0.0.1", NULL };
    if (rl_security_resolve(&a->sec, addrs) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct args a = { .rank = RPC_RANK_ENV, .hb = 15000 };
    if (argc >= 2 && strcmp(argv[1], "--make-keys") == 0) {
        if (argc != 3) return bad("--make-keys DIR goes alone", argv[1]);
        return rl_keys_make_cli(PROG, argv[2]);
    }
    int rc = parse(&a, argc, argv);
    if (rc >= 0) return rc;
    if (defaults(&a) != 0) return 2;
    signal(SIGPIPE, SIG_IGN);
    struct rpc_opts o = { .name = a.name, .rank = a.rank, .world_size = a.world, .master = a.master,
                          .bind_host = a.bind_host, .default_timeout_ms = 120000, .init_timeout_ms = 120000,
                          .heartbeat_ms = 200, .heartbeat_timeout_ms = a.hb };
    if (a.sec.curve) rl_keys_apply(&a.sec.keys, &o);
    return observer_run(&o, true);
}
