/* A run's lifecycle as a user meets it (issue 35): the exit status of a
 * run that spends its budget with and without a target, the first line
 * (the env's id, "no target", the budget), the rates of an evaluation's
 * metrics row, a resume with a new budget (the lr column across it) and
 * one with nothing left to do, and progress lines that fit $COLUMNS or
 * the terminal (a pty). Real tributary-train processes on loopback. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kit.h"

#define RUN_S 300.0   /* any one run, ASan included */

/* The last line of out: the JSON summary. */
static cJSON *summary(const char *out)
{
    const char *last = strrchr(out, '{');
    while (last && last > out && last[-1] != '\n') last = memrchr(out, '{', (size_t)(last - out));
    ck_assert_msg(last != NULL, "no summary in\n%s", out);
    cJSON *j = cJSON_Parse(last);
    ck_assert_msg(j != NULL, "bad summary %s", last);
    return j;
}

static const char *jstr(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    ck_assert_msg(cJSON_IsString(v), "no string %s", k);
    return v->valuestring;
}

/* The first line of kit_out, a fresh string. */
static char *first_line(void) { return strndup(kit_out, strcspn(kit_out, "\n")); }

/* ---- metrics.csv ------------------------------------------------------------- */

#define MAX_ROWS 4096
struct table {
    int rows;
    double steps[MAX_ROWS], wall[MAX_ROWS], sps[MAX_ROWS], lr[MAX_ROWS], eval[MAX_ROWS];
};

/* Column name's index in the header line h. */
static int column(const char *h, const char *name)
{
    int k = 0;
    size_t n = strlen(name);
    for (const char *p = h; *p && *p != '\n'; k++) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\n')) return k;
        p += strcspn(p, ",\n");
        if (*p == ',') p++;
    }
    ck_abort_msg("no column %s in %.300s", name, h);
    return -1;
}

/* Cell k of the row at line (NaN when empty). */
static double cell(const char *line, int k)
{
    for (int i = 0; i < k; i++) line = strchr(line, ',') + 1;
    if (*line == ',' || *line == '\n' || !*line) return NAN;
    return strtod(line, NULL);
}

static void read_table(const char *dir, struct table *t)
{
    char *csv = kit_must_read_in(dir, "metrics.csv", NULL);
    int ks = column(csv, "env_steps"), kw = column(csv, "wall_s"), kr = column(csv, "sps"), kl = column(csv, "lr"),
        ke = column(csv, "eval_return");
    t->rows = 0;
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        ck_assert_int_lt(t->rows, MAX_ROWS);
        int r = t->rows++;
        t->steps[r] = cell(line, ks), t->wall[r] = cell(line, kw), t->sps[r] = cell(line, kr);
        t->lr[r] = cell(line, kl), t->eval[r] = cell(line, ke);
    }
    free(csv);
}

static char *scratch(void)
{
    char *d = strdup("/tmp/test_rl_runs_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

/* ---- the exit status and the first line -------------------------------------- */

/* A run that spends its budget without a target is a success (exit 0,
 * "outcome":"completed"); with a target it missed, exit 1
 * ("target-missed"). The first line says "no target", never "target nan",
 * and the budget. */
START_TEST(test_exit_status)
{
    const char *none[] = { "--preset", "ppo-fast", "--observers", "1", "--max-steps", "2048", "--no-stop-at-target",
                           "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, none, RUN_S);
    ck_assert_msg(rc == 0, "no target, budget spent: exit %d\n%s\n%s", rc, kit_out, kit_err);
    char *first = first_line();
    ck_assert_msg(strstr(first, "; no target; budget 2048 env steps") && !strstr(first, "nan"), "%s", first);
    free(first);
    cJSON *j = summary(kit_out);
    ck_assert_str_eq(jstr(j, "outcome"), "completed");
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    cJSON_Delete(j);
    /* an env without a threshold: the same */
    const char *pend[] = { "--env", "Pendulum-v1", "--observers", "1", "--envs-per-observer", "2", "--max-updates", "1",
                           "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, pend, RUN_S);
    ck_assert_msg(rc == 0, "Pendulum-v1, no target: exit %d\n%s\n%s", rc, kit_out, kit_err);
    first = first_line();
    ck_assert_msg(strstr(first, " on Pendulum-v1: ") && strstr(first, "; no target; budget 500000 env steps or 1 update"),
                  "%s", first);
    free(first);
    /* a target missed within the budget: 1, and the summary says which */
    const char *missed[] = { "--preset", "ppo-fast", "--observers", "1", "--max-steps", "2048", "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, missed, RUN_S);
    ck_assert_msg(rc == 1, "target missed: exit %d\n%s\n%s", rc, kit_out, kit_err);
    first = first_line();
    ck_assert_msg(strstr(first, "; target 475; budget 2048 env steps"), "%s", first);
    free(first);
    j = summary(kit_out);
    ck_assert_str_eq(jstr(j, "outcome"), "target-missed");
    cJSON_Delete(j);
}
END_TEST

/* A plug-in is named by its env's id on the first line, with where its
 * code came from beside it. */
START_TEST(test_first_line_plugin)
{
    const char *args[] = { "--env", POINT_REACH_SO, "--observers", "1", "--envs-per-observer", "2",
                           "--steps-per-rollout", "16", "--max-updates", "1", "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    char want[700], *first = first_line();
    snprintf(want, sizeof want, " on PointReach-v0 (plug-in %s): ", POINT_REACH_SO);
    ck_assert_msg(strstr(first, want) && strstr(first, "; no target; "), "no '%s' in\n%s", want, first);
    free(first);
}
END_TEST

/* ---- the rates of a forced row --------------------------------------------------- */

/* Async evaluations end at any time, each with a metrics row: a row that
 * comes before --log-every has passed since the last full one has its
 * rates over that full interval and the time since (never over a sliver:
 * sps 0, or a spike). Every row's sps is checked against that rule from
 * the CSV's own env_steps and wall_s. */
START_TEST(test_eval_row_rates)
{
    char *dir = scratch();
    const double every = 0.5;
    const char *args[] = { "--preset", "ppo-fast", "--mode", "async", "--observers", "2", "--max-steps", "60000",
                           "--eval-every", "64", "--eval-episodes", "2", "--log-every", "0.5", "--no-stop-at-target",
                           "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    static struct table t;
    read_table(dir, &t);
    /* the full rows before the last one (a virtual one at the start) */
    double f0_steps = 0, f0_wall = 0, f1_steps = 0, f1_wall = 0;
    bool have_full = false;
    int evals = 0, partial_evals = 0;
    for (int r = 0; r < t.rows; r++) {
        bool full = t.wall[r] - f1_wall >= every;
        double want;
        if (full) want = (t.steps[r] - f1_steps) / (t.wall[r] - f1_wall);
        else if (have_full) want = (t.steps[r] - f0_steps) / (t.wall[r] - f0_wall);
        else want = t.steps[r] > 0 ? t.steps[r] / t.wall[r] : NAN;
        if (!isnan(t.eval[r])) {
            evals++;
            partial_evals += !full;
            /* 0 only where no env step was counted over its whole span (a slow start) */
            ck_assert_msg(t.sps[r] > 0 || want == 0, "row %d (an evaluation's, at %g env steps): sps %g", r, t.steps[r],
                          t.sps[r]);
        }
        if (isnan(want)) ck_assert_msg(isnan(t.sps[r]), "row %d: sps %g before any measure", r, t.sps[r]);
        else
            ck_assert_msg(fabs(t.sps[r] - want) <= 1e-6 * want + 1e-9, "row %d (%s, %g env steps at %g s): sps %.9g, not %.9g",
                          r, full ? "full" : "within --log-every of the last", t.steps[r], t.wall[r], t.sps[r], want);
        if (full) {
            f0_steps = f1_steps, f0_wall = f1_wall;
            f1_steps = t.steps[r], f1_wall = t.wall[r];
            have_full = true;
        }
    }
    ck_assert_msg(evals >= 2 && partial_evals >= 1, "%d evaluation rows, %d within --log-every of the last", evals,
                  partial_evals);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    free(dir);
}
END_TEST

/* ---- resumes ------------------------------------------------------------------- */

/* A resume with a larger --max-steps anneals on from the lr the run had
 * where it stopped, to 0 at the new end: the lr column never goes up
 * across it (it went from 0.0041 up to 0.0044 here before). */
START_TEST(test_resume_new_budget_lr)
{
    char *dir = scratch();
    /* 4 x 32 x 16 = 2048 steps and 8 updates an iteration: stopped by the
     * update budget at 8192 of its 32768 steps, the lr at 3/4 of --lr */
    const char *a1[] = { "--preset", "ppo-fast", "--max-steps", "32768", "--max-updates", "32", "--log-every", "0.01",
                         "--no-stop-at-target", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a1, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    static struct table t;
    read_table(dir, &t);
    int n1 = t.rows;
    ck_assert_int_ge(n1, 1);
    double last1 = t.lr[n1 - 1];
    ck_assert_msg(last1 > 0.003 && last1 < 0.005, "the first session ended at lr %g", last1);
    const char *a2[] = { "--resume", dir, "--max-steps", "65536", "--max-updates", "0", "--log-every", "0.01", "--quiet",
                         NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a2, RUN_S);
    ck_assert_msg(rc == 0, "resume: exit %d\n%s\n%s", rc, kit_out, kit_err);
    ck_assert_msg(strstr(kit_out, "tributary: a new --max-steps: the lr anneals from "), "%s", kit_out);
    read_table(dir, &t);
    ck_assert_msg(t.rows > n1 + 2, "%d rows after the resume", t.rows - n1);
    for (int r = 1; r < t.rows; r++)
        ck_assert_msg(t.lr[r] <= t.lr[r - 1] * (1 + 1e-12), "row %d (%g env steps%s): lr %g after %g", r, t.steps[r],
                      r == n1 ? ", the resumed session's first" : "", t.lr[r], t.lr[r - 1]);
    ck_assert_msg(t.lr[n1] > 0.5 * last1, "the resumed lr %g fell from %g", t.lr[n1], last1);
    ck_assert_msg(t.lr[t.rows - 1] < 0.1 * last1, "the lr at the new end: %g", t.lr[t.rows - 1]);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    free(dir);
}
END_TEST

/* A resume whose budget is already spent says so, trains nothing and
 * adds no row to the metrics. */
START_TEST(test_resume_nothing_to_do)
{
    char *dir = scratch();
    const char *a1[] = { "--preset", "ppo-fast", "--observers", "1", "--max-steps", "2048", "--no-stop-at-target",
                         "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a1, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    size_t csv_len, jsonl_len;
    char *csv = kit_must_read_in(dir, "metrics.csv", &csv_len), *jsonl = kit_must_read_in(dir, "metrics.jsonl", &jsonl_len);
    const char *a2[] = { "--resume", dir, "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a2, RUN_S);
    ck_assert_msg(rc == 0, "resume: exit %d\n%s\n%s", rc, kit_out, kit_err);
    ck_assert_msg(strstr(kit_err, "the resumed run has already reached --max-steps 2048"), "%s", kit_err);
    size_t csv2_len, jsonl2_len;
    char *csv2 = kit_must_read_in(dir, "metrics.csv", &csv2_len), *jsonl2 = kit_must_read_in(dir, "metrics.jsonl", &jsonl2_len);
    ck_assert_msg(csv2_len == csv_len && memcmp(csv, csv2, csv_len) == 0, "metrics.csv grew:\n%s\nafter:\n%s", csv, csv2);
    ck_assert_msg(jsonl2_len == jsonl_len && memcmp(jsonl, jsonl2, jsonl_len) == 0, "metrics.jsonl grew");
    free(csv), free(csv2), free(jsonl), free(jsonl2);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    free(dir);
}
END_TEST

/* ---- progress lines that fit ------------------------------------------------------ */

/* The progress lines of kit_out-like text: every line between the first
 * and the summary. Returns the longest one's length and counts them. */
static size_t longest_progress(const char *out, int *n)
{
    size_t longest = 0;
    *n = 0;
    const char *p = strchr(out, '\n');
    while (p && p[1] && p[1] != '{') {
        const char *line = p + 1;
        size_t len = strcspn(line, "\r\n");
        if (strncmp(line, "tributary: ", 11) != 0) {
            if (len > longest) longest = len;
            ++*n;
        }
        p = strchr(line, '\n');
    }
    return longest;
}

static const char *const progress_args[] = { "--preset", "ppo-fast", "--observers", "2", "--max-steps", "20000",
                                             "--log-every", "0.05", "--no-stop-at-target", NULL };

/* With $COLUMNS 80 every progress line (and the legend) fits 79 columns;
 * without it (a file) the lines are whole. */
START_TEST(test_progress_columns)
{
    unsetenv("COLUMNS");
    int rc = kit_run(TRIB_TRAIN_BIN, progress_args, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    int n;
    size_t whole = longest_progress(kit_out, &n);
    ck_assert_msg(n >= 3 && whole > 120, "%d lines, the longest %zu characters:\n%s", n, whole, kit_out);
    setenv("COLUMNS", "80", 1);
    rc = kit_run(TRIB_TRAIN_BIN, progress_args, RUN_S);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    size_t fit = longest_progress(kit_out, &n);
    ck_assert_msg(n >= 3 && fit <= 79, "COLUMNS=80: %d lines, the longest %zu characters:\n%s", n, fit, kit_out);
    ck_assert_msg(strstr(kit_out, "  return "), "no return left:\n%s", kit_out);
}
END_TEST

/* On a terminal (a pty of 60 columns, no $COLUMNS) the lines fit it. */
START_TEST(test_progress_pty)
{
    struct winsize ws = { .ws_row = 24, .ws_col = 60 };
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, &ws);
    if (pid < 0 && (errno == ENOENT || errno == ENODEV || errno == ENXIO)) {   /* a box without ptys */
        fprintf(stderr, "test_progress_pty: skipped: forkpty: %s\n", strerror(errno));
        return;
    }
    ck_assert_msg(pid >= 0, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        unsetenv("COLUMNS");
        const char *argv[16] = { TRIB_TRAIN_BIN };
        for (int i = 0; progress_args[i]; i++) argv[i + 1] = progress_args[i];
        execv(TRIB_TRAIN_BIN, (char *const *)argv);
        _exit(127);
    }
    static char out[1 << 16];
    size_t len = 0;
    double end = kit_now_s() + RUN_S;
    for (;;) {
        struct pollfd pfd = { .fd = master, .events = POLLIN };
        int left = (int)((end - kit_now_s()) * 1000);
        if (left <= 0) {
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("tributary-train on a pty did not end in %g s:\n%.*s", RUN_S, (int)len, out);
        }
        if (poll(&pfd, 1, left) <= 0) continue;
        ssize_t k = read(master, out + len, sizeof out - 1 - len);
        if (k <= 0) break;   /* EIO: the child's side closed */
        len += (size_t)k;
        if (len == sizeof out - 1) break;
    }
    out[len] = '\0';
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    close(master);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d:\n%s", status, out);
    int n;
    size_t fit = longest_progress(out, &n);
    ck_assert_msg(n >= 3 && fit <= 59, "a 60-column pty: %d lines, the longest %zu characters:\n%s", n, fit, out);
}
END_TEST

KIT_MAIN("rl_runs",
         { "runs", 300, .tests = { test_exit_status, test_first_line_plugin, test_eval_row_rates,
           test_resume_new_budget_lr, test_resume_nothing_to_do, test_progress_columns, test_progress_pty } })
