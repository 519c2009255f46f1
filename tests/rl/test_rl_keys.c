/* The run key (rl/keys.h) and encrypted runs end to end: key files made
 * and read (exact messages for every way one can be wrong), runs that must
 * be refused without --keys or --insecure, and tributary-agent +
 * tributary-observer as real processes on loopback with the same key, another
 * run's key and none. Ports are chosen at run time; every process started
 * is reaped, and every key directory removed. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "rl/keys.h"
#include "rl/rl.h"
#include "rl_harness.h"
#include "kit.h"

/* ---- processes (rl_harness.h) ------------------------------------------------------ */

/* rl_wait, and no sanitizer report on its stderr (under ASan/UBSan),
 * whatever else a test checks. */
static int run_wait(struct rl_proc *p, double timeout_s)
{
    int rc = rl_wait(p, timeout_s);
    ck_assert_msg(!strstr(p->err, "Sanitizer") && !strstr(p->err, "runtime error:"), "%s:\n%s", p->name, p->err);
    return rc;
}

/* Waits until p's stderr holds `what` (failing after timeout_s). */
static void wait_err(const struct rl_proc *p, const char *what, double timeout_s)
{
    double t0 = trib_now_s();
    while (!err_has(p, what)) {
        if (trib_now_s() - t0 > timeout_s) {
            char *err = kit_must_read_fd(p->err_fd, NULL);
            ck_abort_msg("%s: no '%s' on stderr within %.0f s:\n%s", p->name, what, timeout_s, err);
        }
        usleep(20000);
    }
}

/* ---- key directories --------------------------------------------------------- */

static char tmpdir[64];             /* this test's scratch directory */

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_rl_keys_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Kills what a test left running and removes its scratch directory (two
 * levels: key directories and their files). */
static void teardown(void)
{
    rl_kill_all();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* tmpdir/name into out. */
static const char *in_tmp(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
    return out;
}

/* Makes a key directory with tributary-agent --make-keys. */
static void make_keys(const char *dir)
{
    const char *args[] = { "--make-keys", dir, NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    int rc = run_wait(&p, 60);
    ck_assert_msg(rc == 0, "--make-keys %s: exit %d\n%s", dir, rc, p.err);
    rl_free(&p);
}

/* Writes text into dir/tributary.key (dir made 0700) with mode `mode`. */
static void write_key_file(const char *dir, const char *text, mode_t mode)
{
    ck_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
    char path[256];
    snprintf(path, sizeof path, "%s/" RL_KEY_FILE, dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(path, mode), 0);
}

/* ---- key files ------------------------------------------------------------------ */

/* A fresh key from --make-keys: 0700 directory, 0600 file (whatever the
 * umask), the documented format, a key that loads; never overwritten. */
START_TEST(test_make_keys)
{
    char dir[128], path[160];
    in_tmp(dir, sizeof dir, "run/keys");       /* a missing parent is an error */
    const char *args[] = { "--make-keys", dir, NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    ck_assert_int_eq(run_wait(&p, 60), 1);
    char want[512];
    snprintf(want, sizeof want, "tributary-agent: cannot make the key directory %s: No such file or directory\n", dir);
    ck_assert_str_eq(p.err, want);
    rl_free(&p);

    in_tmp(dir, sizeof dir, "keys");
    mode_t old = umask(0);                     /* the programs must not rely on the umask */
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    umask(old);
    ck_assert_int_eq(run_wait(&p, 60), 0);
    ck_assert_str_eq(p.err, "");
    snprintf(path, sizeof path, "%s/tributary.key", dir);
    struct rl_keys k;
    ck_assert_msg(rl_keys_load(dir, &k) == 0, "%s", rl_last_error());
    ck_assert_str_eq(k.path, path);
    snprintf(want, sizeof want, "wrote %s (public key %.8s...); copy %s to every host of the run", path, k.public_key,
             dir);
    ck_assert_msg(strncmp(p.out, want, strlen(want)) == 0, "stdout:\n%s", p.out);
    rl_free(&p);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0700);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0600);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char text[512] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char lines[128];
    snprintf(lines, sizeof lines, "\npublic = %s\nsecret = %s\n", k.public_key, k.secret_key);
    ck_assert_msg(n > strlen(lines) && strcmp(text + n - strlen(lines), lines) == 0, "key file:\n%s", text);
    ck_assert_int_eq(text[0], '#');

    /* a second --make-keys does not overwrite it */
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    ck_assert_int_eq(run_wait(&p, 60), 1);
    snprintf(want, sizeof want, "tributary-agent: %s exists: not overwriting it (remove it to make a new key)\n", path);
    ck_assert_str_eq(p.err, want);
    rl_free(&p);
    struct rl_keys k2;
    ck_assert_int_eq(rl_keys_load(dir, &k2), 0);
    ck_assert_str_eq(k2.secret_key, k.secret_key);
    /* --make-keys goes alone */
    const char *mixed[] = { "--observers", "1", "--make-keys", dir, NULL };
    rl_start(&p, TRIB_AGENT_BIN, mixed, NULL);
    ck_assert_int_eq(run_wait(&p, 60), 2);
    ck_assert_str_eq(p.err, "tributary-agent: --make-keys DIR goes alone: tributary-agent --make-keys DIR\n");
    rl_free(&p);
}
END_TEST

/* Every way a key file can be wrong, with its exact message; and what a
 * valid one may hold (comments, blank lines, CRLF, spaces, a "DIR/"). */
START_TEST(test_key_file_errors)
{
    char pub[41], sec[41], pub2[41], sec2[41];
    ck_assert_int_eq(zmq_curve_keypair(pub, sec), 0);
    ck_assert_int_eq(zmq_curve_keypair(pub2, sec2), 0);
    char dir[128], path[160], text[1024], want[512];
    in_tmp(dir, sizeof dir, "k");
    snprintf(path, sizeof path, "%s/tributary.key", dir);
    struct rl_keys k;

    ck_assert_int_eq(rl_keys_load(dir, &k), -1);
    snprintf(want, sizeof want, "cannot open %s: No such file or directory (make a key with tributary-agent --make-keys %s)",
             path, dir);
    ck_assert_str_eq(rl_last_error(), want);

    struct { const char *text; int line; const char *msg; } cases[] = {
        { "public = %1$s\n", 0, "no 'secret' line (truncated?)" },
        { "secret = %2$s\n", 0, "no 'public' line (truncated?)" },
        { "", 0, "no 'public' line (truncated?)" },
        { "public = %1$s\nsecret = %2$.20s", 2, "'secret' is not a 40-character Z85 key" },   /* cut short */
        { "public = %1$s\nsecret = %2$.39s~\n", 2, "'secret' is not a 40-character Z85 key" }, /* '~' is no Z85 */
        { "public = %1$.40s0\nsecret = %2$s\n", 1, "'public' is not a 40-character Z85 key" }, /* 41 characters */
        { "public = %1$s\npublic = %1$s\n", 2, "'public' given twice" },
        { "# ok\npublic\n", 2, "expected 'public = KEY' or 'secret = KEY'" },
        { "private = %1$s\n", 1, "expected 'public = KEY' or 'secret = KEY'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(text, sizeof text, cases[i].text, pub, sec);
        write_key_file(dir, text, 0600);
        ck_assert_int_eq(rl_keys_load(dir, &k), -1);
        if (cases[i].line) snprintf(want, sizeof want, "%s: line %d: %s", path, cases[i].line, cases[i].msg);
        else snprintf(want, sizeof want, "%s: %s", path, cases[i].msg);
        ck_assert_msg(strcmp(rl_last_error(), want) == 0, "case %zu: '%s'\nnot '%s'", i, rl_last_error(), want);
        ck_assert_str_eq(k.secret_key, "");    /* nothing half-read is left */
    }
    /* keys of two different pairs */
    snprintf(text, sizeof text, "public = %s\nsecret = %s\n", pub2, sec);
    write_key_file(dir, text, 0600);
    ck_assert_int_eq(rl_keys_load(dir, &k), -1);
    snprintf(want, sizeof want, "%s: the public key is not the secret key's", path);
    ck_assert_str_eq(rl_last_error(), want);
    /* too big to be a key file */
    char big[5000];
    memset(big, '#', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    write_key_file(dir, big, 0600);
    ck_assert_int_eq(rl_keys_load(dir, &k), -1);
    snprintf(want, sizeof want, "%s: larger than 4096 bytes: not a key file", path);
    ck_assert_str_eq(rl_last_error(), want);
    /* readable by group or others: refused, naming the fix */
    snprintf(text, sizeof text, "public = %s\nsecret = %s\n", pub, sec);
    mode_t modes[] = { 0640, 0604, 0644, 0660 };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        write_key_file(dir, text, modes[i]);
        ck_assert_int_eq(rl_keys_load(dir, &k), -1);
        snprintf(want, sizeof want, "%s is readable by group or others (mode %04o): run chmod 600 %s", path,
                 (unsigned)modes[i], path);
        ck_assert_str_eq(rl_last_error(), want);
    }
    /* not a regular file */
    char sub[128];
    in_tmp(sub, sizeof sub, "d");
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    char subkey[160];
    snprintf(subkey, sizeof subkey, "%s/tributary.key", sub);
    ck_assert_int_eq(mkdir(subkey, 0700), 0);
    ck_assert_int_eq(rl_keys_load(sub, &k), -1);
    snprintf(want, sizeof want, "%s is not a regular file", subkey);
    ck_assert_str_eq(rl_last_error(), want);
    /* valid: comments, blank lines, CRLF, spaces, 0400, "DIR/" */
    snprintf(text, sizeof text, "# a comment\r\n\r\n  secret=%s  \r\n\tpublic =\t%s\r\n# end\n", sec, pub);
    write_key_file(dir, text, 0400);
    char slash[160];
    snprintf(slash, sizeof slash, "%s/", dir);
    ck_assert_msg(rl_keys_load(slash, &k) == 0, "%s", rl_last_error());
    ck_assert_str_eq(k.public_key, pub);
    ck_assert_str_eq(k.secret_key, sec);
    ck_assert_str_eq(k.path, path);
}
END_TEST

START_TEST(test_loopback)
{
    static const char *const yes[] = { "tcp://127.0.0.1:5917", "tcp://127.1.2.3:1", "tcp://localhost:80",
                                       "tcp://[::1]:7", "127.0.0.1", "::1", "localhost", NULL };
    static const char *const no[] = { "tcp://10.1.2.3:5917", "tcp://*:5917", "tcp://0.0.0.0:5917", "10.0.0.7",
                                      "0.0.0.0", "tcp://[::]:5", "tcp://no-such-host.invalid:5", "", "tcp://127.0.0.1",
                                      NULL };
    for (int i = 0; yes[i]; i++) ck_assert_msg(rl_addr_is_loopback(yes[i]), "%s counts as loopback", yes[i]);
    for (int i = 0; no[i]; i++) ck_assert_msg(!rl_addr_is_loopback(no[i]), "%s does not count as loopback", no[i]);
}
END_TEST

/* ---- the programs' flags ------------------------------------------------------------ */

#define REFUSED(prog, addr)                                                                                       \
    prog ": multi-host runs are encrypted: pass --keys DIR (make one with tributary-agent --make-keys DIR) or " \
         "--insecure (" addr " is not a loopback address)\n"

struct refusal {
    const char *bin;
    const char *args[10];
    const char *env[3];
    const char *err;                /* all of stderr */
};

/* What a program refuses before it binds or connects anything: exit 2 and
 * exactly this stderr. */
static void check_refusals(const struct refusal *cases, int n)
{
    for (int i = 0; i < n; i++) {
        struct rl_proc p;
        rl_start(&p, cases[i].bin, cases[i].args, cases[i].env);
        int rc = run_wait(&p, 30);
        ck_assert_msg(rc == 2, "case %d (%s %s): exit %d, not 2\nstderr:\n%s", i, cases[i].bin, cases[i].args[0], rc,
                      p.err);
        ck_assert_msg(strcmp(p.err, cases[i].err) == 0, "case %d: stderr\n'%s'\nnot\n'%s'", i, p.err, cases[i].err);
        ck_assert_str_eq(p.out, "");
        rl_free(&p);
    }
}

START_TEST(test_non_loopback_refused)
{
    char keys[128], err_keys[512], err_both[256];
    in_tmp(keys, sizeof keys, "none");
    snprintf(err_keys, sizeof err_keys,
             "tributary-observer: cannot open %s/tributary.key: No such file or directory (make a key with "
             "tributary-agent --make-keys %s)\n", keys, keys);
    snprintf(err_both, sizeof err_both, "tributary-agent: --keys and --insecure exclude each other\n");
    const struct refusal cases[] = {
        { TRIB_AGENT_BIN, { "--observers", "1", "--master", "tcp://10.255.0.1:5917", NULL }, { NULL },
          REFUSED("tributary-agent", "tcp://10.255.0.1:5917") },
        { TRIB_AGENT_BIN, { "--observers", "1", NULL }, { "MASTER_ADDR=0.0.0.0", "MASTER_PORT=5917", NULL },
          REFUSED("tributary-agent", "tcp://0.0.0.0:5917") },
        { TRIB_AGENT_BIN, { "--master", "tcp://*:5917", NULL }, { NULL },
          REFUSED("tributary-agent", "tcp://*:5917") },
        { TRIB_OBSERVER_BIN, { "--rank", "1", "--world-size", "2", "--master", "tcp://10.255.0.1:5917", NULL },
          { NULL }, REFUSED("tributary-observer", "tcp://10.255.0.1:5917") },
        { TRIB_OBSERVER_BIN, { "--rank", "1", "--master", "tcp://127.0.0.1:5917", "--bind-host", "10.255.0.2", NULL },
          { NULL }, REFUSED("tributary-observer", "10.255.0.2") },
        { TRIB_OBSERVER_BIN, { "--rank", "1", NULL }, { "MASTER_ADDR=10.255.0.1", "MASTER_PORT=5917", NULL },
          REFUSED("tributary-observer", "tcp://10.255.0.1:5917") },
        { TRIB_AGENT_BIN, { "--keys", keys, "--insecure", NULL }, { NULL }, err_both },
        { TRIB_OBSERVER_BIN, { "--rank", "1", "--keys", keys, NULL }, { NULL }, err_keys },
        { TRIB_TRAIN_BIN, { "--keys", "", NULL }, { NULL },
          "tributary-train: --keys needs a directory name of 1..399 characters (see tributary-train --help)\n" },
    };
    check_refusals(cases, (int)(sizeof cases / sizeof *cases));

    /* --insecure gets past the check: the agent fails later, binding an
     * address this host does not have */
    const char *args[] = { "--observers", "1", "--master", "tcp://10.255.0.1:5917", "--insecure", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    ck_assert_int_eq(run_wait(&p, 30), 1);
    ck_assert_msg(strstr(p.err, "cannot bind tcp://10.255.0.1:5917: ") && !strstr(p.err, "multi-host"),
                  "stderr:\n%s", p.err);
    rl_free(&p);
}
END_TEST

/* A group-readable key is refused by every program, naming the fix. */
START_TEST(test_group_readable_refused)
{
    char dir[128], err[3][512];
    in_tmp(dir, sizeof dir, "keys");
    make_keys(dir);
    char path[160];
    snprintf(path, sizeof path, "%s/tributary.key", dir);
    ck_assert_int_eq(chmod(path, 0640), 0);
    const char *progs[] = { "tributary-agent", "tributary-observer", "tributary-train" };
    for (int i = 0; i < 3; i++)
        snprintf(err[i], sizeof err[i], "%s: %s is readable by group or others (mode 0640): run chmod 600 %s\n",
                 progs[i], path, path);
    const struct refusal cases[] = {
        { TRIB_AGENT_BIN, { "--keys", dir, "--observers", "1", "--master", "tcp://127.0.0.1:5917", NULL }, { NULL },
          err[0] },
        { TRIB_OBSERVER_BIN, { "--rank", "1", "--master", "tcp://127.0.0.1:5917", "--keys", dir, NULL }, { NULL },
          err[1] },
        { TRIB_TRAIN_BIN, { "--keys", dir, NULL }, { NULL }, err[2] },
    };
    check_refusals(cases, 3);
}
END_TEST

/* ---- encrypted runs ------------------------------------------------------------------ */

/* The summary (the last stdout line): out of budget, with `observers`
 * observers and none lost. */
static void assert_budget_summary(const struct rl_proc *p, int observers)
{
    cJSON *j = summary(p);
    check_summary_shape(j);
    ck_assert_msg(strcmp(jstr(j, "stopped_by"), "budget") == 0, "stopped by %s\nstderr:\n%s", jstr(j, "stopped_by"),
                  p->err);
    ck_assert_int_eq((int)jnum(j, "observers"), observers);
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 0);
    cJSON_Delete(j);
}

struct agent_run {
    struct rl_proc agent;
    char master[64];
    char keys[128];
};

/* Starts tributary-agent for one observer on a free loopback port with
 * --keys keys (NULL: none) and a budget of 2 updates. */
static void start_agent(struct agent_run *r, const char *keys)
{
    snprintf(r->master, sizeof r->master, "tcp://127.0.0.1:%d", free_port());
    snprintf(r->keys, sizeof r->keys, "%s", keys ? keys : "");
    const char *args[] = { "--observers", "1", "--master", r->master, "--max-updates", "2", "--quiet",
                           keys ? "--keys" : NULL, keys, NULL };
    rl_start(&r->agent, TRIB_AGENT_BIN, args, NULL);
    wait_err(&r->agent, "tributary-agent: listening on tcp://", 60);
}

/* Runs an observer against r's agent with keys (NULL: none) to its end. */
static int run_observer(const struct agent_run *r, const char *keys, struct rl_proc *p, double timeout_s)
{
    const char *args[] = { "--rank", "1", "--world-size", "2", "--master", r->master, keys ? "--keys" : NULL, keys,
                           NULL };
    rl_start(p, TRIB_OBSERVER_BIN, args, NULL);
    return run_wait(p, timeout_s);
}

/* An observer with the agent's key trains to the agent's budget, the
 * agent says its traffic is encrypted and neither logs a refusal. */
START_TEST(test_same_key_trains)
{
    char keys[128];
    in_tmp(keys, sizeof keys, "keys");
    make_keys(keys);
    struct rl_keys k;
    ck_assert_int_eq(rl_keys_load(keys, &k), 0);
    struct agent_run r;
    start_agent(&r, keys);
    struct rl_proc obs;
    int rc = run_observer(&r, keys, &obs, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 0, "observer exit %d\nstderr:\n%s", rc, obs.err);
    ck_assert_str_eq(after_joined(obs.err_nowait), "");
    rc = run_wait(&r.agent, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "agent exit %d\nstderr:\n%s", rc, r.agent.err);
    assert_budget_summary(&r.agent, 1);
    char want[512];
    snprintf(want, sizeof want, "tributary-agent: listening on %s (encrypted: %s/tributary.key, public key %.8s...)\n",
             r.master, keys, k.public_key);
    ck_assert_str_eq(r.agent.err_nowait, want);
    rl_free(&obs);
    rl_free(&r.agent);

    /* tributary-train hands its --keys to the observers it forks */
    const char *args[] = { "--keys", keys, "--observers", "2", "--max-updates", "2", "--quiet", NULL };
    struct rl_proc t;
    rl_start(&t, TRIB_TRAIN_BIN, args, NULL);
    rc = run_wait(&t, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "tributary-train exit %d\nstderr:\n%s", rc, t.err);
    ck_assert_str_eq(t.err_nowait, "");
    assert_budget_summary(&t, 2);
    rl_free(&t);
    /* ...and --insecure changes nothing on loopback */
    const char *plain[] = { "--insecure", "--observers", "1", "--max-updates", "1", "--quiet", NULL };
    rl_start(&t, TRIB_TRAIN_BIN, plain, NULL);
    rc = run_wait(&t, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "tributary-train --insecure exit %d\nstderr:\n%s", rc, t.err);
    ck_assert_str_eq(t.err_nowait, "");
    rl_free(&t);
}
END_TEST

/* The observer is refused quickly (well within its 120 s rendezvous
 * timeout) and says why: one of obs_whys (which side of a handshake notices
 * a mismatch first varies, and so does what the observer sees); the agent
 * logs the refusal with one of agent_whys (NULL: need not log), stays up
 * and trains with the right observer afterwards. */
static void check_refused(const char *agent_keys, const char *obs_keys, const char *const *obs_whys, const char *hint,
                          const char *const *agent_whys)
{
    struct agent_run r;
    start_agent(&r, agent_keys);
    struct rl_proc bad;
    double t0 = trib_now_s();
    int rc = run_observer(&r, obs_keys, &bad, 60);
    double took = trib_now_s() - t0;
    ck_assert_msg(rc == 1, "refused observer exit %d\nstderr:\n%s", rc, bad.err);
    ck_assert_msg(took < 20, "the refused observer took %.1f s to give up", took);
    bool match = false;
    for (int i = 0; obs_whys[i] && !match; i++) {
        char want[768];
        snprintf(want, sizeof want,
                 "observer1: rpc_init: rendezvous with %s failed: rpc: security handshake with %s failed (%s) calling "
                 "(rendezvous).__hello\nobserver1: could not reach the agent at %s; is it using --keys? %s\n",
                 r.master, r.master, obs_whys[i], r.master, hint);
        match = strcmp(bad.err_nowait, want) == 0;
    }
    ck_assert_msg(match, "observer stderr:\n%s", bad.err);
    ck_assert_str_eq(bad.out, "");
    if (agent_whys) {
        wait_err(&r.agent, "rpc: agent: refused a connection from ", 10);
        char *err = kit_must_read_fd(r.agent.err_fd, NULL);
        bool any = false;
        for (int i = 0; agent_whys[i]; i++) any |= strstr(err, agent_whys[i]) != NULL;
        ck_assert_msg(any, "agent stderr names no expected reason:\n%s", err);
        free(err);
    }
    ck_assert_msg(rl_running(&r.agent), "the agent ended after the refusal");
    struct rl_proc good;
    rc = run_observer(&r, agent_keys, &good, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 0, "observer exit %d\nstderr:\n%s", rc, good.err);
    rc = run_wait(&r.agent, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "agent exit %d\nstderr:\n%s", rc, r.agent.err);
    assert_budget_summary(&r.agent, 1);
    rl_free(&good);
    rl_free(&bad);
    rl_free(&r.agent);
}

#define CLOSED_3(curve, q) "the peer closed the connection during the " curve "handshake 3 times in a row (" q ")"

START_TEST(test_other_key_refused)
{
    char keys[128], other[128];
    in_tmp(keys, sizeof keys, "keys");
    in_tmp(other, sizeof other, "other");
    make_keys(keys);
    make_keys(other);
    static const char *const obs[] = { CLOSED_3("CURVE ", "does it use another key?"), NULL };
    static const char *const agent[] = {
        "its CURVE handshake is not for this worker's key (a worker with another run's --keys?)", NULL
    };
    check_refused(keys, other, obs, "(this observer has --keys: the agent needs the same key)", agent);
}
END_TEST

START_TEST(test_no_key_refused)
{
    char keys[128];
    in_tmp(keys, sizeof keys, "keys");
    make_keys(keys);
    static const char *const obs[] = { "the peer requires CURVE encryption and this worker has no key",
                                       CLOSED_3("", "does it require CURVE encryption?"), NULL };
    static const char *const agent[] = {
        "it does not use CURVE encryption (a worker without --keys?)",
        "it closed the connection during the CURVE handshake (a worker without this run's key?)", NULL
    };
    check_refused(keys, NULL, obs, "(then give this observer the same --keys DIR)", agent);
}
END_TEST

/* The other way round: an observer with a key facing an agent without (a
 * plain agent logs it only when it notices the mismatch first). */
START_TEST(test_key_facing_plain_refused)
{
    char keys[128];
    in_tmp(keys, sizeof keys, "keys");
    make_keys(keys);
    static const char *const obs[] = { "the peer does not use CURVE encryption and this worker does",
                                       CLOSED_3("CURVE ", "does it use another key?"), NULL };
    check_refused(NULL, keys, obs, "(this observer has --keys: the agent needs the same key)", NULL);
}
END_TEST

KIT_MAIN("rl_keys",
         { "files", 60, .setup = setup, .teardown = teardown, .tests = { test_make_keys, test_key_file_errors,
           test_loopback } },
         { "flags", 120, .setup = setup, .teardown = teardown, .tests = { test_non_loopback_refused,
           test_group_readable_refused } },
         { "runs", 300, .setup = setup, .teardown = teardown, .tests = { test_same_key_trains,
           test_other_key_refused, test_no_key_refused,
           test_key_facing_plain_refused } })
