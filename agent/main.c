/* tributary-agent: the agent on its own (rank 0 of a world of N observers
 * + 1), for observers started elsewhere (tributary-observer, scripts/launch). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "optim/dist_optim.h"
#include "rpc/dist_autograd.h"

#define PROG "tributary-agent"

static char master[256];

static int set_master(void *u, const char *v)
{
    if (strncmp(v, "tcp://", 6) != 0 || strlen(v) >= sizeof master) {
        fprintf(stderr, PROG ": --master must look like tcp://HOST:PORT, not '%s'\n", v);
        return -1;
    }
    snprintf(master, sizeof master, "%s", v);
    return 0;
}

static void listening(const char *endpoint, void *user)
{
    (void)user;
    fprintf(stderr, PROG ": listening on %s\n", endpoint);
}

static const char about[] =
    "Usage: " PROG " [options]\n"
    "The agent alone: binds the rendezvous (rank 0) and waits for --observers\n"
    "tributary-observer processes (ranks 1..N, any host) to join, then trains.\n"
    "The address is --master, else MASTER_ADDR/MASTER_PORT, else tcp://127.0.0.1:29500.\n"
    "Exit status: 0 solved, 1 not solved or a failure, 2 bad usage, 130/143 interrupted.\n";

int main(int argc, char **argv)
{
    struct rl_opt extra[] = { { "master", true, "  --master tcp://H:P     the rendezvous address to bind\n", set_master, NULL } };
    struct rl_config cfg;
    int rc = rl_config_parse(&cfg, PROG, about, argc, argv, extra, 1);
    if (rc >= 0) return rc;
    if (!master[0]) {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        snprintf(master, sizeof master, "tcp://%s:%s", addr && *addr ? addr : "127.0.0.1",
                 port && *port ? port : "29500");
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    agent_install_signals();
    dist_autograd_init();
    dist_optim_init();
    agent_register();
    struct rpc_opts o = agent_rpc_opts(&cfg, master);
    o.on_listening = listening;
    return agent_run(&cfg, &o);
}
