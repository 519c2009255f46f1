/* The progress line, fit to the terminal, and the JSON summary with its
 * outcome (the counters they show: run_stats_counters.c). */
#include "agent/run_stats.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "agent/run_stats_counters.h"
#include "common/clock.h"
#include "rl/algo.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "rpc/rpc.h"

/* The smallest lag with at least q of the updates at or below it. */
static int64_t lag_quantile(const struct run_stats *s, double q)
{
    int64_t need = (int64_t)ceil(q * (double)s->lag_n), acc = 0;
    for (int i = 0; i < RUN_STATS_LAG_BINS; i++) {
        acc += s->lag_hist[i];
        if (acc >= need && acc > 0) return i;
    }
    return 0;
}

/* ---- the progress line, fit to the terminal ---------------------------------- */

/* One figure of the progress line: its text ("  name value") and how soon
 * it goes when the line must be shorter (a higher drop goes first; 0:
 * never). */
struct piece {
    char text[48];
    int drop;
    bool lead;                      /* text begins with the two spaces between figures */
};

/* A figure into p[*n] ("  name -" for NaN). */
static void piece(struct piece *p, int *n, int drop, const char *name, const char *fmt, double v)
{
    struct piece *q = &p[(*n)++];
    q->drop = drop;
    q->lead = true;
    int k = snprintf(q->text, sizeof q->text, "  %s ", name);
    if (isnan(v)) snprintf(q->text + k, sizeof q->text - (size_t)k, "-");
    else snprintf(q->text + k, sizeof q->text - (size_t)k, fmt, v);
}

int run_stats_line_width(FILE *f)
{
    struct winsize ws;
    int fd = fileno(f);   /* not stderr's: a line to a file is whole, whatever stderr is */
    if (fd >= 0 && isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col - 1;
    const char *c = getenv("COLUMNS");
    char *end = NULL;
    long cols = c ? strtol(c, &end, 10) : 0;
    if (c && end != c && *end == '\0' && cols >= 2 && cols <= 100000) return (int)cols - 1;
    return 0;
}

/* text to f, broken at spaces into lines of at most width (0: one line),
 * the lines after the first indented by two spaces. */
static void print_wrapped(FILE *f, const char *text, int width)
{
    size_t len = strlen(text), at = 0;
    int indent = 0;
    while (width > indent + 10 && len - at + (size_t)indent > (size_t)width) {   /* narrower: not worth breaking */
        size_t room = (size_t)(width - indent), cut = room;
        while (cut > 0 && text[at + cut] != ' ') cut--;
        if (cut == 0) cut = room;   /* one word longer than the line: cut it */
        fprintf(f, "%*s%.*s\n", indent, "", (int)cut, text + at);
        at += cut;
        while (text[at] == ' ') at++;
        indent = 2;
    }
    fprintf(f, "%*s%s\n", indent, "", text + at);
}

void run_stats_print(const struct run_stats *s, FILE *f, const struct run_interval *iv)
{
    if (s->cfg.quiet) return;
    const struct rl_algo *algo = rl_algo_get(s->cfg.algo);
    bool lag = s->mode.policy_lag, ac = algo->stats & RL_STATS_VALUE, ppo = algo->stats & RL_STATS_CLIP;
    int width = run_stats_line_width(f);
    if (iv->first) {
        char legend[512];
        snprintf(legend, sizeof legend,
                 "progress every %gs: return and len: mean of the last 100 episodes; sps and upd/s: over the interval;",
                 s->cfg.log_every);
        print_wrapped(f, legend, width);
        snprintf(legend, sizeof legend, "  %s: means over the interval's updates%s%s", algo->stats_legend,
                 ac ? "; ev: explained variance of the interval's rollouts" : "; running: the running reward",
                 lag ? "; lag: mean/max policy versions between a rollout and its updates" : "");
        print_wrapped(f, legend, width);
        if (s->cfg.eval_every > 0)
            print_wrapped(f, "  eval: mean return of the greedy evaluation (--eval-every) that ended in the interval",
                          width);
        if (width > 0) {
            snprintf(legend, sizeof legend,
                     "  lines fit %d columns (the terminal's, else $COLUMNS): the least telling figures go first; "
                     "--logdir's metrics keep them all", width + 1);
            print_wrapped(f, legend, width);
        }
    }
    /* in the line's order; drop: the order they go in to fit */
    struct piece p[20];
    int n = 0;
    piece(p, &n, 3, "", "%7.1fs", iv->wall_s);
    snprintf(p[0].text, sizeof p[0].text, "%7.1fs", iv->wall_s);   /* the first: no name */
    p[0].lead = false;
    piece(p, &n, 0, "steps", "%9.0f", (double)iv->env_steps);
    piece(p, &n, 2, "sps", "%7.0f", iv->sps);
    piece(p, &n, 7, "ep", "%6.0f", (double)iv->episodes);
    piece(p, &n, 0, "return", "%8.2f", iv->return_mean);
    piece(p, &n, 6, "len", "%6.1f", iv->length_mean);
    if (ac) {
        piece(p, &n, 12, "pg", "%+.4f", iv->policy_loss);
        piece(p, &n, 11, "vf", "%.4g", iv->value_loss);
        piece(p, &n, 13, "ent", "%.4f", iv->entropy);
        if (ppo) {
            piece(p, &n, 14, "kl", "%.5f", iv->approx_kl);
            piece(p, &n, 15, "clip", "%.3f", iv->clipfrac);
        }
        piece(p, &n, 10, "ev", "%+.3f", iv->explained_var);
    } else {
        piece(p, &n, 9, "loss", "%+.4g", iv->policy_loss);
        if (s->cfg.running_reward) piece(p, &n, 5, "running", "%7.2f", iv->running_reward);
    }
    piece(p, &n, 8, "upd/s", "%.1f", iv->updates_per_s);
    if (!isnan(iv->eval_return)) piece(p, &n, 4, "eval", "%.2f", iv->eval_return);
    if (lag) {
        struct piece *q = &p[n++];
        q->drop = 5;
        q->lead = true;
        snprintf(q->text, sizeof q->text, "  lag %.1f/%.0f", isnan(iv->lag_mean) ? 0.0 : iv->lag_mean,
                 isnan(iv->lag_max) ? 0.0 : iv->lag_max);
    }
    /* the figures that go first, until the line fits */
    bool keep[20];
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        keep[i] = true;
        total += strlen(p[i].text);
    }
    while (width > 0 && total > (size_t)width) {
        int worst = -1;
        for (int i = 0; i < n; i++)
            if (keep[i] && p[i].drop > 0 && (worst < 0 || p[i].drop > p[worst].drop)) worst = i;
        if (worst < 0) break;
        keep[worst] = false;
        total -= strlen(p[worst].text);
    }
    char line[20 * 48 + 1];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (!keep[i]) continue;
        const char *t = len == 0 && p[i].lead ? p[i].text + 2 : p[i].text;
        len += (size_t)snprintf(line + len, sizeof line - len, "%s", t);
    }
    if (width > 0 && len > (size_t)width) line[width] = '\0';   /* what is never dropped, still too long: cut */
    fprintf(f, "%s\n", line);
    fflush(f);
}

/* s's characters escaped for a JSON string. */
static void json_chars(FILE *f, const char *s)
{
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

static void json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v)) fprintf(f, ",\"%s\":%.6g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* How a run ended, by what stopped it (README's exit status): a row per
 * stop reason; "budget" splits on whether the run had a target. */
static const struct {
    const char *stopped_by, *outcome;
} outcomes[] = {
    { "SIGINT", "interrupted" },
    { "SIGTERM", "interrupted" },
    { "budget", "target-missed" },   /* with a target; without one: "completed", a success */
};

const char *run_stats_outcome(struct run_stats *s, bool solved, const char *stopped_by, bool *success)
{
    pthread_mutex_lock(&s->mu);
    bool ran = s->env_steps > 0 || s->updates > 0;   /* else the budget passed before the run met anyone */
    bool failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    bool budget = strcmp(stopped_by, "budget") == 0;
    *success = !failed && (solved || (budget && isnan(s->target) && ran));
    if (failed || (budget && !ran && !solved)) return "failed";
    if (solved) return "solved";
    if (*success) return "completed";
    for (size_t i = 0; i < sizeof outcomes / sizeof outcomes[0]; i++)
        if (strcmp(outcomes[i].stopped_by, stopped_by) == 0) return outcomes[i].outcome;
    return "failed";
}

void run_stats_summary(struct run_stats *s, FILE *f, bool solved, int observers_lost, int observers_rejoined,
                       const char *stopped_by)
{
    bool success;
    const char *outcome = run_stats_outcome(s, solved, stopped_by, &success);
    pthread_mutex_lock(&s->mu);
    double wall = trib_now_s() - s->t0;
    fprintf(f, "{\"solved\":%s,\"outcome\":\"%s\",\"stopped_by\":\"%s\",\"mode\":\"%s\",\"algo\":\"%s\",\"env\":\"", solved ? "true" : "false",
            outcome, stopped_by, rl_mode_name(s->cfg.mode), rl_algo_name(s->cfg.algo));
    json_chars(f, s->spec ? s->spec->id : s->cfg.env);
    if (s->spec && strcmp(s->spec->id, s->cfg.env) != 0) {   /* a plug-in: where its code came from */
        fprintf(f, "\",\"env_plugin\":\"");
        json_chars(f, s->cfg.env);
    }
    fprintf(f, "\",\"observers\":%d,\"envs_per_observer\":%d,\"env_steps\":%lld", s->cfg.observers,
            s->cfg.envs_per_observer, (long long)s->env_steps);
    json_num(f, "wall_s", wall);
    json_num(f, "sps", s->env_steps / fmax(wall, 1e-9));
    fprintf(f, ",\"updates\":%lld,\"episodes\":%lld", (long long)s->updates, (long long)s->episodes);
    json_num(f, "updates_per_s", s->updates / fmax(wall, 1e-9));
    json_num(f, "return_mean", s->win.n ? rl_window_mean(&s->win) : NAN);
    fprintf(f, ",\"episodes_judged\":%d", s->win.n);
    /* what "solved" judged: one rule for every algorithm (README) */
    json_num(f, "target", s->target);
    fprintf(f, ",\"solved_when\":\"return_mean of the last 100 episodes >= target\"");
    if (s->cfg.running_reward) json_num(f, "running_reward", s->running);
    /* policy lag is the mode's figure (async): sync updates use one version's samples */
    if (s->mode.policy_lag) {
        json_num(f, "lag_mean", s->lag_n ? s->lag_sum / (double)s->lag_n : 0.0);
        fprintf(f, ",\"lag_p95\":%lld,\"lag_max\":%lld", (long long)lag_quantile(s, 0.95), (long long)s->lag_max);
        fprintf(f, ",\"lag_hist\":[");
        int last = 0;
        for (int i = 0; i < RUN_STATS_LAG_BINS; i++)
            if (s->lag_hist[i]) last = i;
        for (int i = 0; i <= last; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)s->lag_hist[i]);
        fprintf(f, "]");
        /* --max-policy-lag: updates refused as too stale, and their samples */
        fprintf(f, ",\"max_policy_lag\":%d,\"dropped_stale_updates\":%lld,\"dropped_stale_samples\":%lld",
                s->cfg.max_policy_lag, (long long)s->dropped_updates, (long long)s->dropped_samples);
        fprintf(f, ",\"vtrace\":%s", s->corrected ? "true" : "false");
    }
    json_num(f, "agent_busy_frac", s->busy_s / fmax(wall, 1e-9));
    /* --double-buffer's cost: two act calls per observer step, merged in two forwards */
    fprintf(f, ",\"act_calls\":%lld,\"act_forwards\":%lld", (long long)s->act_calls, (long long)s->act_forwards);
    /* The agent's own sockets: every observer's traffic passes through them
     * (observers call only the agent), their heartbeats to each other not. */
    struct rpc_stats rs;
    rpc_get_stats(&rs);
    fprintf(f, ",\"rpc_msgs_sent\":%llu,\"rpc_msgs_recv\":%llu,\"rpc_bytes_sent\":%llu,\"rpc_bytes_recv\":%llu",
            (unsigned long long)rs.msgs_sent, (unsigned long long)rs.msgs_recv, (unsigned long long)rs.bytes_sent,
            (unsigned long long)rs.bytes_recv);
    double steps = s->env_steps > 0 ? (double)s->env_steps : NAN;
    json_num(f, "rpc_msgs_per_step", (double)(rs.msgs_sent + rs.msgs_recv) / steps);
    json_num(f, "rpc_bytes_per_step", (double)(rs.bytes_sent + rs.bytes_recv) / steps);
    fprintf(f, ",\"rpc_dropped\":%llu",
            (unsigned long long)(rs.dropped_spoofed + rs.dropped_unverified + rs.dropped_malformed + rs.dropped_cut +
                                 rs.refused_busy));
    fprintf(f, ",\"observers_rejoined\":%d,\"observers_lost\":%d}\n", observers_rejoined, observers_lost);
    fflush(f);
    pthread_mutex_unlock(&s->mu);
}
