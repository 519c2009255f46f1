/* The observer process (observer/observer.h): its lifetime, the agent's
 * shutdown and loss, a crash's last word. Its parts are observer/state.h's. */
#define _GNU_SOURCE
#include "observer/observer.h"
#include "observer/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/notice.h"
#include "rl/last_word.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"
#include "tensor/ops.h"

/* Wakes observer_run. */
static void end_signal(struct observer *o)
{
    pthread_mutex_lock(&o->end_mu);
    pthread_cond_broadcast(&o->end_cv);
    pthread_mutex_unlock(&o->end_mu);
}

static int fn_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    atomic_store(&o->shutdown, true);
    end_signal(o);
    *res = rpc_nil();
    return 0;
}

/* I/O thread: the agent (worker 0) failed or left. Must not block long. */
static void on_event(const struct rpc_event *ev, void *user)
{
    struct observer *o = user;
    if (ev->id != 0 || (ev->kind != RPC_EVENT_FAILED && ev->kind != RPC_EVENT_LEAVE)) return;
    pthread_mutex_lock(&o->end_mu);
    if (!o->agent_gone) o->agent_gone = ev->kind;
    pthread_cond_broadcast(&o->end_cv);
    pthread_mutex_unlock(&o->end_mu);
}

struct observer *observer_new(void)
{
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);
    struct observer *o = trib_xcalloc(1, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_mutex_init(&o->roll_mu, NULL);
    pthread_mutex_init(&o->end_mu, NULL);
    pthread_cond_init(&o->end_cv, NULL);
    observer_serve_setup(o);   /* the mode's own functions at set-up */
    rpc_register(RL_FN_SHUTDOWN, fn_shutdown, o);
    return o;
}

void observer_free(struct observer *o)
{
    if (!o) return;
    observer_release(o);
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->roll_mu);
    pthread_mutex_destroy(&o->end_mu);
    pthread_cond_destroy(&o->end_cv);
    free(o);
}

/* A crash's last word (rl/last_word.h), on its own thread: the agent is
 * told at once (rl_gave_up(why, "crashed")), so it drops this observer
 * saying it crashed instead of waiting for its heartbeats to stop. */
static bool crash_announce;

static char crash_who[64];

static void last_word(int sig, void *u)
{
    (void)u;
    char why[96];
    rl_describe_end(sig, 0, why, sizeof why);
    if (crash_announce) fprintf(stderr, "%s: %s: telling the agent\n", rpc_self()->name[0] ? rpc_self()->name : crash_who, why);
    struct rpc_value a = rpc_list(2), r = rpc_nil();
    a.list.items[0] = rpc_str(why);
    a.list.items[1] = rpc_str(RL_GONE_CRASHED);
    rpc_sync("agent", RL_FN_GAVE_UP, &a, &r, RL_LAST_WORD_MS - 500);
    rpc_value_clear(&a);
    rpc_value_clear(&r);
}

int observer_run(const struct rpc_opts *opts, bool announce)
{
    dist_autograd_init();
    struct observer *o = observer_new();
    const char *who = opts->name ? opts->name : "observer", *master = opts->master ? opts->master : "MASTER_ADDR";
    char what[512];
    snprintf(what, sizeof what, "the agent at %s (the run starts once the agent and all its observers have joined)",
             master);
    struct rpc_opts mine = *opts;
    mine.on_event = on_event;
    mine.event_user = o;
    /* before rpc_init: the agent's calls (set-up, the first steps) may be
     * served before rpc_init has returned here; a crash before the RPC
     * layer is up just has no one to tell (rpc_sync fails at once) */
    crash_announce = announce;
    snprintf(crash_who, sizeof crash_who, "%s", who);
    if (rl_last_word_install(last_word, NULL) != 0) fprintf(stderr, "%s: %s\n", who, rl_last_error());
    struct notice *wait = announce ? notice_start(who, what, 3, NULL, NULL) : NULL;
    int irc = rpc_init(&mine);
    notice_stop(wait);
    if (irc >= 0 && announce)
        fprintf(stderr, "%s: joined the agent at %s as rank %d\n", rpc_self()->name, rpc_master_endpoint(),
                rpc_self()->id);

    if (irc < 0) {
        const char *me = opts->name ? opts->name : "observer";
        fprintf(stderr, "%s: %s\n", me, rpc_last_error());   /* "rpc_init: ..." */
        struct rpc_stats st;
        rpc_get_stats(&st);
        if (st.handshakes_failed)
            fprintf(stderr, "%s: could not reach the agent at %s; is it using --keys? %s\n", me, rpc_master_endpoint(),
                    opts->curve ? "(this observer has --keys: the agent needs the same key)"
                                : "(then give this observer the same --keys DIR)");
        observer_free(o);
        return 1;
    }
    const char *me = rpc_self()->name;
    /* Sleeps until rl_shutdown or the agent's loss wakes it (no polling: the
     * agent's graceful shutdown waits for this process to get there). */
    pthread_mutex_lock(&o->end_mu);
    while (!atomic_load(&o->shutdown) && !o->agent_gone) pthread_cond_wait(&o->end_cv, &o->end_mu);
    int gone = o->agent_gone;
    pthread_mutex_unlock(&o->end_mu);
    int rc = 0;
    if (gone && !atomic_load(&o->shutdown)) {
        if (gone == RPC_EVENT_FAILED)
            fprintf(stderr, "%s: lost the agent (no heartbeat within %d ms): exiting\n", me, opts->heartbeat_timeout_ms);
        else
            fprintf(stderr, "%s: lost the agent (it left): exiting\n", me);
        rc = 1;
    }
    rpc_shutdown(rc == 0);
    observer_free(o);
    return rc;
}
