/* tributary-agent: the agent on its own (rank 0 of a world of N observers
 * + 1), for observers started elsewhere (tributary-observer, scripts/launch). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "common/argv.h"
#include "optim/dist_optim.h"
#include "rl/keys.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

#define PROG "tributary-agent"

static char master[256];
static struct rl_security sec;

static int set_master(void *u, const char *v)
{
    if (strncmp(v, "tcp://", 6) != 0 || strlen(v) >= sizeof master) {
        fprintf(stderr, PROG ": --master must look like tcp://HOST:PORT, not '%s'\n", v);
        return -2;
    }
    snprintf(master, sizeof master, "%s", v);
    return 0;
}

static void listening(const char *endpoint, void *user)
{
    (void)user;
    char key[12];
    if (!sec.curve) {
        fprintf(stderr, PROG ": listening on %s\n", endpoint);
        return;
    }
    rl_key_short(sec.keys.public_key, key);
    fprintf(stderr, PROG ": listening on %s (encrypted: %s, public key %s)\n", endpoint, sec.keys.path, key);
}

static int make_keys_alone(void *u, const char *v)
{
    (void)u;
    (void)v;
    fprintf(stderr, PROG ": --make-keys DIR goes alone: " PROG " --make-keys DIR\n");
    return -2;
}

static const char about[] =
    "Usage: " PROG " [options]\n"
    "       " PROG " --make-keys DIR\n"
    "The agent alone: binds the rendezvous (rank 0) and waits for --observers\n"
    "tributary-observer processes (ranks 1..N, any host) to join, then trains.\n"
    "The address is --master, else MASTER_ADDR/MASTER_PORT, else tcp://127.0.0.1:29500;\n"
    "one that is not loopback needs --keys DIR or --insecure (README \"Security\").\n"
    "--make-keys DIR writes a new run key to DIR/" RL_KEY_FILE " (DIR made mode 700, the\n"
    "file 600) and exits.\n"
    "Exit status: 0 solved or the budget spent without a target, 1 a target missed or a\n"
    "failure, 2 bad usage, 130/143 interrupted (as tributary-train).\n";

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--make-keys") == 0) {
        if (argc != 3) {
            make_keys_alone(NULL, NULL);
            return 2;
        }
        return rl_keys_make_cli(PROG, argv[2]);
    }
    struct argv_opt extra[4] = {
        { .name = "master", .arg = "tcp://H:P", .help = "the rendezvous address to bind", .set = set_master },
        { .name = "make-keys", .arg = "DIR", .help = "write a new run key to DIR/" RL_KEY_FILE " and exit (alone)",
          .set = make_keys_alone },
    };
    int n_extra = 2 + rl_security_opts(&sec, PROG, &extra[2]);
    struct rl_config cfg;
    int rc = rl_config_parse(&cfg, PROG, about, argc, argv, extra, n_extra);
    if (rc >= 0) return rc;
    if (!master[0]) {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        snprintf(master, sizeof master, "tcp://%s:%s", addr && *addr ? addr : "127.0.0.1",
                 port && *port ? port : "29500");
    }
    const char *addrs[] = { master, NULL };
    if (rl_security_resolve(&sec, addrs) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    agent_install_signals();
    dist_autograd_init();
    dist_optim_init();
    struct agent *a = agent_new(&cfg);
    if (!a) return 1;
    agent_register(a);
    struct rpc_opts o = agent_rpc_opts(&cfg, master);
    if (sec.curve) rl_keys_apply(&sec.keys, &o);
    o.on_listening = listening;
    rc = agent_run(a, &o);
    agent_free(a);
    return rc;
}
