/* The agent's observers and calls, below every other file of the agent
 * (state.h): which observers are alive, lost, gone (and how) or rejoining,
 * waiting for calls to them and giving them up once the run's stop is
 * overdue. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/policy.h"
#include "agent/state.h"
#include "agent/run_stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/text.h"
#include "rl/messages.h"
#include "rl/rl.h"

int agent_live_peers(const struct agent *a)
{
    int n = 0;
    for (int k = 0; k < a->n_peers; k++) n += a->peers[k].alive;
    return n;
}

void agent_name_peer(struct agent *a, int k, const char *name)
{
    struct obs_peer *p = &a->peers[k];
    snprintf(p->name, sizeof p->name, "%s", name);
    text_escape(p->label, sizeof p->label, p->name, strlen(p->name));
}

/* Whether observer k is known to be gone, and how (into how): it said so
 * as it went (rl_gave_up), or tributary-train saw its process end. */
static bool peer_gone(struct agent *a, int k, char *how, size_t cap)
{
    struct obs_peer *p = &a->peers[k];
    if (atomic_load(&p->going)) {
        pthread_mutex_lock(&a->mu);
        snprintf(how, cap, "%s", p->going_why);
        pthread_mutex_unlock(&a->mu);
        return true;
    }
    return agent_observer_ended(p->id, how, cap);
}

/* Stops using observer k: lost (gone, or the RPC layer declared it dead)
 * or, while it lives, dropped because a call to it failed (why says how).
 * An observer known to be gone is never called alive: "lost observer1: it
 * crashed (signal 11, SIGSEGV)". */
void agent_lose_peer(struct agent *a, int k, const char *why_raw)
{
    struct obs_peer *p = &a->peers[k];
    if (!p->alive) return;
    char why[TEXT_ESCAPED_CAP(1024)];   /* often a peer's error reply: escaped */
    text_escape(why, sizeof why, why_raw, strlen(why_raw));
    p->alive = false;
    a->n_lost++;
    policy_forget_caller(a->policy, p->id);
    policy_drop_sync_caller(a->policy, p->id);
    char how[600];
    struct rpc_worker_info wi;
    int live = agent_live_peers(a);
    const char *s = live == 1 ? "" : "s";
    if (peer_gone(a, k, how, sizeof how)) {
        snprintf(p->gone_why, sizeof p->gone_why, "%s", how);
        fprintf(stderr, PROG ": lost %s: it %s%s%s; continuing with %d observer%s\n", p->label, how, why[0] ? "; " : "",
                why, live, s);
    } else if (rpc_get_worker_info(p->name, &wi) == 0) {
        snprintf(p->gone_why, sizeof p->gone_why, "was dropped (alive: %.680s)", why);
        fprintf(stderr, PROG ": dropping %s (alive): %s; continuing with %d observer%s\n", p->label, why, live, s);
    } else {
        snprintf(p->gone_why, sizeof p->gone_why, "was lost (%.700s)", why);
        fprintf(stderr, PROG ": lost %s: %s; continuing with %d observer%s\n", p->label, why, live, s);
    }
}

int agent_tend_gone(struct agent *a, struct rpc_future **futs)
{
    int n = 0;
    char how[600];
    for (int k = 0; k < a->n_peers; k++) {
        struct obs_peer *p = &a->peers[k];
        if (!p->alive || !peer_gone(a, k, how, sizeof how)) continue;
        agent_lose_peer(a, k, "");
        if (futs && futs[k]) {
            rpc_future_free(futs[k]);   /* its reply will never come */
            futs[k] = NULL;
        }
        rpc_future_free(p->run);
        p->run = NULL;
        n++;
    }
    return n;
}

int agent_none_left(const struct agent *a)
{
    char list[3000] = "";
    size_t n = 0;
    for (int k = 0; k < a->n_peers && n < sizeof list; k++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s %s", k ? "; " : "", a->peers[k].label,
                              a->peers[k].gone_why[0] ? a->peers[k].gone_why : "was lost");
    return rl_set_error("no observer is left: %s", list);
}

bool agent_stop_overdue(struct agent *a)
{
    if (a->stop_due == 0) {
        if (!agent_signal() && !atomic_load(&a->stop) && !run_stats_out_of_budget(a->stats)) return false;
        a->stop_due = trib_now_s();
    }
    return trib_now_s() - a->stop_due >= AGENT_STOP_GRACE_S;
}

/* Once the stop is overdue: gives up the calls (fn) of futs still in flight,
 * dropping their observers (a stuck env step, a silent peer), and frees
 * every future of futs. Returns whether it did. Main thread. */
bool agent_abandon_overdue(struct agent *a, struct rpc_future **futs, const char *fn)
{
    if (!agent_stop_overdue(a)) return false;
    agent_tend_gone(a, futs);   /* those that are gone are said to be, not given up on */
    for (int k = 0; k < a->n_peers; k++) {
        if (!futs[k]) continue;
        if (!rpc_future_done(futs[k])) {
            char why[160];
            snprintf(why, sizeof why, "its %s call still runs %g s after the run was due to stop", fn, AGENT_STOP_GRACE_S);
            agent_lose_peer(a, k, why);
            a->abandoned = true;
        }
        rpc_future_free(futs[k]);
        futs[k] = NULL;
    }
    return true;
}

/* Waits until every future of futs is done (sleeping, looking at the stop
 * every 100 ms), or gives up on those left once the stop is overdue
 * (abandon_overdue). Main thread. */
void agent_await_calls(struct agent *a, struct rpc_future **futs, const char *fn)
{
    for (;;) {
        struct rpc_future *pending[RL_MAX_OBSERVERS];
        size_t n = 0;
        for (int k = 0; k < a->n_peers; k++)
            if (futs[k] && !rpc_future_done(futs[k])) pending[n++] = futs[k];
        if (n == 0) return;
        if (rpc_future_wait_any(pending, n, 100) >= 0) continue;
        /* an observer that is gone answers never: dropped at once */
        if (agent_tend_gone(a, futs) > 0) continue;
        if (agent_abandon_overdue(a, futs, fn)) return;
    }
}

bool agent_peer_lost(struct agent *a, int k)
{
    char how[600];
    struct rpc_worker_info wi;
    return peer_gone(a, k, how, sizeof how) || rpc_get_worker_info(a->peers[k].name, &wi) != 0;
}

/* Loses every observer the RPC layer no longer knows (dead or gone), with
 * why; returns how many. */
int agent_lose_dead_peers(struct agent *a, const char *why)
{
    int n = 0;
    for (int k = 0; k < a->n_peers; k++) {
        struct rpc_worker_info wi;
        if (a->peers[k].alive && rpc_get_worker_info(a->peers[k].name, &wi) != 0) {
            agent_lose_peer(a, k, why);
            n++;
        }
    }
    return n;
}

void agent_say_error(void)
{
    const char *m = rl_last_error();
    char e[TEXT_ESCAPED_CAP(1024)];
    fprintf(stderr, PROG ": %s\n", text_escape(e, sizeof e, m, strlen(m)));
}

void agent_say_limited(struct agent *a, const char *line)
{
    pthread_mutex_lock(&a->mu);
    double now = trib_now_s();
    if (now - a->said_t >= 1.0) a->said_t = now, a->said_lines = 0;
    if (a->said_lines++ < 10) fprintf(stderr, PROG ": %s\n", line);
    pthread_mutex_unlock(&a->mu);
}

int agent_peer_by_id(const struct agent *a, int id)
{
    for (int k = 0; k < a->n_peers; k++)
        if (a->peers[k].id == id) return k;
    return -1;
}

struct rpc_future *agent_send_setup(struct agent *a, int k, const void *state, size_t slen)
{
    agent_norm_set_up(a, k, state != NULL);   /* what its next delta counts */
    struct rl_setup_msg m = { .config = rl_config_to_value(&a->cfg), .policy = policy_rref(a->policy), .index = k,
                              .state = state ? rpc_bytes(state, slen) : rpc_nil(),
                              .generation = a->peers[k].generation, .norm = agent_norm_pack(a) };
    struct rpc_value args = rl_setup_pack(&m);
    rpc_value_clear(&m.config);
    rpc_value_clear(&m.state);
    rpc_value_clear(&m.norm);
    struct rpc_future *f = rpc_async(a->peers[k].name, RL_FN_SETUP, &args, 0);
    rpc_value_clear(&args);
    return f;
}

/* A membership event: an observer found dead is lost; a new process that
 * took a run's observer rank (rank 0 admits one only once the old process
 * is declared gone) is set up by agent_tend_rejoins. */
static void on_member_event(struct agent *a, const struct rpc_event *ev)
{
    int k = agent_peer_by_id(a, ev->id);
    if (ev->kind != RPC_EVENT_JOIN) {
        if (k >= 0 && a->peers[k].alive) {
            char why[128];
            snprintf(why, sizeof why, "no heartbeat within %d ms", a->cfg.heartbeat_timeout);
            agent_lose_peer(a, k, why);
        }
        if (k >= 0) a->peers[k].rejoining = false;
        return;
    }
    if (k < 0) {
        char name[TEXT_ESCAPED_CAP(sizeof ev->name)];
        fprintf(stderr, PROG ": ignoring worker %s (id %d): not an observer rank of this run\n",
                text_escape(name, sizeof name, ev->name, strnlen(ev->name, sizeof ev->name)), ev->id);
        return;
    }
    struct obs_peer *p = &a->peers[k];
    agent_lose_peer(a, k, "a new process took its rank");
    if (p->setup) {                 /* the set-up of a process that is gone already */
        rpc_future_wait(p->setup, NULL);
        rpc_future_free(p->setup);
        p->setup = NULL;
    }
    agent_name_peer(a, k, ev->name);
    p->rejoining = true;
}

/* Observer k's set-up is done: it takes part, or its failure is said. */
static void rejoin_done(struct agent *a, int k)
{
    struct obs_peer *p = &a->peers[k];
    if (rpc_future_wait(p->setup, NULL) != 0) {
        const char *err = rpc_future_error(p->setup);
        char e[TEXT_ESCAPED_CAP(1024)];
        fprintf(stderr, PROG ": %s (rank %d) rejoined but its set-up failed: %s\n", p->label, p->id,
                text_escape(e, sizeof e, err, strlen(err)));
    } else {
        p->alive = true;
        atomic_store(&p->going, false);
        p->gone_why[0] = '\0';
        a->n_rejoined++;
        fprintf(stderr, PROG ": %s rejoined (rank %d); training with %d observer%s\n", p->label, p->id,
                agent_live_peers(a), agent_live_peers(a) == 1 ? "" : "s");
        if (a->mode->rejoined) a->mode->rejoined(a, k);
    }
    rpc_future_free(p->setup);
    p->setup = NULL;
}

/* Never once the run is stopping. */
void agent_tend_rejoins(struct agent *a, bool block)
{
    struct rpc_event ev;
    while (rpc_next_event(&ev, 0) == 1) on_member_event(a, &ev);
    for (int k = 0; k < a->n_peers; k++) {
        struct obs_peer *p = &a->peers[k];
        if (p->rejoining && !p->run && !atomic_load(&a->stop)) {
            p->rejoining = false;
            p->generation++;
            p->setup = agent_send_setup(a, k, NULL, 0);
        }
        if (p->setup && (block || rpc_future_done(p->setup))) rejoin_done(a, k);
    }
}

/* rl_gave_up(why[, how]): an observer whose env step ran past --step-timeout
 * says why before it exits (its loss follows at its heartbeat timeout), one
 * that crashed says how ("crashed"). */
int agent_fn_gave_up(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *user)
{
    struct agent *a = user;
    if (args->list.len < 1 || args->list.len > 2 || args->list.items[0].kind != RPC_STR ||
        (args->list.len == 2 && args->list.items[1].kind != RPC_STR))
        return rpc_request_fail(req, "gave_up: expected (why[, how])");
    const struct rpc_value *why = &args->list.items[0];
    bool crashed = args->list.len == 2 && args->list.items[1].str.len == strlen(RL_GONE_CRASHED) &&
                   memcmp(args->list.items[1].str.ptr, RL_GONE_CRASHED, strlen(RL_GONE_CRASHED)) == 0;
    /* what it says is its own text: escaped, so that it cannot forge lines
     * of ours ("\nagent: lost observer2: it crashed") */
    char said[TEXT_ESCAPED_CAP(500)], caller[TEXT_ESCAPED_CAP(63)], line[sizeof said + sizeof caller + 16];
    text_escape(said, sizeof said, why->str.ptr, why->str.len < 500 ? why->str.len : 500);
    const char *who = rpc_request_caller(req);
    snprintf(line, sizeof line, "%s gave up: %s", text_escape(caller, sizeof caller, who, strlen(who)), said);
    if (!crashed) agent_say_limited(a, line);   /* a crash is said as its observer is lost, at once */
    /* the observer goes (it exits, or dies of its crash) right after: the
     * main thread drops it now rather than at its heartbeat timeout. The
     * caller is the connection's verified worker, so one observer cannot
     * speak for another. */
    int k = agent_peer_by_id(a, rpc_request_caller_id(req));
    if (k >= 0 && a->peers[k].alive) {
        pthread_mutex_lock(&a->mu);
        if (crashed) snprintf(a->peers[k].going_why, sizeof a->peers[k].going_why, "%.630s", said);
        else snprintf(a->peers[k].going_why, sizeof a->peers[k].going_why, "gave up (%.620s)", said);
        pthread_mutex_unlock(&a->mu);
        atomic_store(&a->peers[k].going, true);
    }
    *res = rpc_nil();
    return 0;
}
