/* tributary-observer: one observer process joining an agent, on this host
 * or another. The agent hands it the run's configuration at setup. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "observer/observer.h"
#include "rl/keys.h"
#include "rl/rl.h"

#define PROG "tributary-observer"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [options]\n"
            "       " PROG " --make-keys DIR   (as tributary-agent --make-keys DIR)\n"
            "Joins the agent's world as one observer and serves it until training ends.\n"
            "The env, sizes and algorithm come from the agent (tributary-agent --help).\n"
            "To rejoin a running job after an observer was lost, start one with its --rank.\n"
            "\n"
            "  --master tcp://H:P      the agent's rendezvous (default: MASTER_ADDR/MASTER_PORT, else\n"
            "                          tcp://127.0.0.1:29500, the agent's default)\n"
            "  --rank R                this observer's rank, 1..N (default: RANK or SLURM_PROCID)\n"
            "  --world-size W          N observers + 1 (default: WORLD_SIZE or SLURM_NTASKS)\n"
            "  --name NAME             worker name (default: observer<rank>)\n"
            "  --bind-host IP          the interface to listen on for peers (default 127.0.0.1;\n"
            "                          use this host's address when the agent is elsewhere)\n"
            "  --heartbeat-timeout MS  silence after which the agent counts as dead (default 15000)\n"
            "  --keys DIR              encrypt and authenticate with the run key DIR/" RL_KEY_FILE ",\n"
            "                          the agent's (tributary-agent --make-keys DIR makes one); needed\n"
            "                          unless --master and --bind-host are loopback, or --insecure\n"
            "  --insecure              run unencrypted and unauthenticated even across hosts\n"
            "  --help                  this text\n"
            "\n"
            "Exit status: 0 when the agent ends training, 1 when it is lost or joining fails,\n"
            "2 bad usage.\n");
}

static int bad(const char *what, const char *v)
{
    fprintf(stderr, PROG ": %s, not '%s' (see " PROG " --help)\n", what, v);
    return 2;
}

static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "master", required_argument, NULL, 'm' },      { "rank", required_argument, NULL, 'r' },
        { "world-size", required_argument, NULL, 'w' },  { "name", required_argument, NULL, 'n' },
        { "bind-host", required_argument, NULL, 'b' },   { "heartbeat-timeout", required_argument, NULL, 't' },
        { "keys", required_argument, NULL, 'k' },        { "insecure", no_argument, NULL, 'i' },
        { "help", no_argument, NULL, 'h' },              { NULL, 0, NULL, 0 },
    };
    static struct rl_security sec = { .prog = PROG };
    if (argc >= 2 && strcmp(argv[1], "--make-keys") == 0) {
        if (argc != 3) return bad("--make-keys DIR goes alone", argv[1]);
        return rl_keys_make_cli(PROG, argv[2]);
    }
    const char *master = NULL, *name = NULL, *bind_host = NULL;
    int rank = RPC_RANK_ENV, world = 0, hb = 15000;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (strncmp(optarg, "tcp://", 6) != 0) return bad("--master must look like tcp://HOST:PORT", optarg);
            master = optarg;
            break;
        case 'r':
            if (!parse_int(optarg, 1, 65535, &rank)) return bad("--rank must be an integer in 1..65535", optarg);
            break;
        case 'w':
            if (!parse_int(optarg, 2, 65536, &world)) return bad("--world-size must be an integer >= 2", optarg);
            break;
        case 'n':
            if (strlen(optarg) == 0 || strlen(optarg) >= 64) return bad("--name must have 1..63 characters", optarg);
            name = optarg;
            break;
        case 'b': bind_host = optarg; break;
        case 't':
            if (!parse_int(optarg, 100, 3600000, &hb)) return bad("--heartbeat-timeout must be in 100..3600000", optarg);
            break;
        case 'k':
            if (rl_security_set_keys(&sec, optarg) != 0) return 2;
            break;
        case 'i': sec.insecure = true; break;
        case 'h': usage(stdout); return 0;
        case ':': return bad("option needs a value", argv[optind - 1]);
        default: return bad("unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc) return bad("unexpected argument", argv[optind]);
    if (rank == RPC_RANK_ENV) {
        const char *r = getenv("RANK");
        if (!r) r = getenv("SLURM_PROCID");
        if (!r || !parse_int(r, 1, 65535, &rank))
            return bad("give --rank (or RANK / SLURM_PROCID) in 1..N", r ? r : "(unset)");
    }
    char defname[32];
    if (!name) {
        snprintf(defname, sizeof defname, "observer%d", rank);
        name = defname;
    }
    char env_master[256];
    if (!master) {      /* as tributary-agent picks its own: MASTER_ADDR/MASTER_PORT, else 127.0.0.1:29500 */
        const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        snprintf(env_master, sizeof env_master, "tcp://%s:%s", a && *a ? a : "127.0.0.1", p && *p ? p : "29500");
        master = env_master;
    }
    const char *addrs[] = { master, bind_host ? bind_host : "127.0.0.1", NULL };
    if (rl_security_resolve(&sec, addrs) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world, .master = master, .bind_host = bind_host,
                          .default_timeout_ms = 120000, .init_timeout_ms = 120000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = hb };
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    return observer_run(&o, true);
}
