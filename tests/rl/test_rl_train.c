/* End-to-end tests of tributary-train: the built program runs as a real
 * process (agent + forked observers on loopback) for a few sync iterations,
 * and its command line rejects bad input with exit status 2. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Runs TRIB_TRAIN_BIN with argv (NULL-terminated, without argv[0]);
 * collects stdout into out and stderr into err (NUL-terminated, truncated
 * to cap). Returns the exit status, or 128+signal. */
static int run_train(const char *const *args, char *out, char *err, size_t cap)
{
    const char *argv[32] = { TRIB_TRAIN_BIN };
    int n = 1;
    for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    char opath[] = "/tmp/test_rl_out_XXXXXX", epath[] = "/tmp/test_rl_err_XXXXXX";
    int ofd = mkstemp(opath), efd = mkstemp(epath);
    ck_assert(ofd >= 0 && efd >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ofd, 1);
    posix_spawn_file_actions_adddup2(&fa, efd, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, TRIB_TRAIN_BIN, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ck_assert_msg(rc == 0, "posix_spawn %s: %s", TRIB_TRAIN_BIN, strerror(rc));
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ssize_t k = pread(ofd, out, cap - 1, 0);
    out[k > 0 ? k : 0] = '\0';
    k = pread(efd, err, cap - 1, 0);
    err[k > 0 ? k : 0] = '\0';
    close(ofd);
    close(efd);
    unlink(opath);
    unlink(epath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count_lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    size_t lp = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, lp) == 0) n++;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return n;
}

static char OUT[1 << 16], ERR[1 << 16];

START_TEST(test_train_two_observers)
{
    const char *args[] = { "--observers", "2", "--max-iters", "20", "--target", "5", "--log-every", "1",
                           "--seed", "3", NULL };
    int rc = run_train(args, OUT, ERR, sizeof OUT);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    int lines = count_lines_starting(OUT, "iter ");
    /* running reward 0.05*r + 0.95*old needs a few iterations to pass 5 */
    ck_assert_msg(lines >= 2 && lines <= 20, "%d progress lines:\n%s", lines, OUT);
    ck_assert_msg(strstr(OUT, "iter      1  steps/s ") != NULL, "no first progress line:\n%s", OUT);
    ck_assert_msg(strstr(OUT, "version 1\n") != NULL, "policy version 1 not reported:\n%s", OUT);
    ck_assert_msg(strstr(OUT, "tributary-train: solved: running reward ") != NULL, "not solved:\n%s", OUT);
    ck_assert_msg(ERR[0] == '\0', "stderr:\n%s", ERR);
}
END_TEST

START_TEST(test_train_async)
{
    const char *args[] = { "--mode", "async", "--observers", "2", "--max-iters", "40", "--target", "5",
                           "--log-every", "1", NULL };
    int rc = run_train(args, OUT, ERR, sizeof OUT);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    ck_assert_msg(strncmp(OUT, "tributary-train: async REINFORCE on CartPole-v1, 2 observers, seed 1", 68) == 0,
                  "%s", OUT);
    int lines = count_lines_starting(OUT, "iter ");
    ck_assert_msg(lines >= 2 && lines <= 40, "%d progress lines:\n%s", lines, OUT);
    /* the first update was computed on version 0: lag 0 */
    ck_assert_msg(strstr(OUT, "iter      1  steps/s ") != NULL && strstr(OUT, "version 1  lag 0.00\n") != NULL,
                  "no first progress line with lag 0:\n%s", OUT);
    ck_assert_msg(strstr(OUT, "tributary-train: solved: running reward ") != NULL, "not solved:\n%s", OUT);
    ck_assert_msg(ERR[0] == '\0', "stderr:\n%s", ERR);
}
END_TEST

START_TEST(test_not_solved_exits_1)
{
    const char *args[] = { "--observers", "1", "--max-iters", "3", "--target", "475", NULL };
    int rc = run_train(args, OUT, ERR, sizeof OUT);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    ck_assert_msg(strstr(OUT, "tributary-train: not solved: running reward ") != NULL, "%s", OUT);
    ck_assert_msg(strstr(OUT, "after 3 iterations") != NULL, "%s", OUT);
    ck_assert_int_eq(count_lines_starting(OUT, "iter "), 1);   /* the last iteration is always logged */
}
END_TEST

START_TEST(test_help)
{
    const char *args[] = { "--help", NULL };
    int rc = run_train(args, OUT, ERR, sizeof OUT);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strncmp(OUT, "Usage: tributary-train [options]\n", 33) == 0, "%s", OUT);
    ck_assert_ptr_nonnull(strstr(OUT, "--observers N"));
    ck_assert_ptr_nonnull(strstr(OUT, "--mode MODE     sync (default)"));
    ck_assert_ptr_nonnull(strstr(OUT, "async: observers loop on their own"));
    ck_assert_str_eq(ERR, "");
}
END_TEST

START_TEST(test_bad_options)
{
    static const struct { const char *args[4]; const char *err; } cases[] = {
        { { "--bogus", NULL }, "tributary-train: unknown option '--bogus' (see tributary-train --help)\n" },
        { { "--observers", "0", NULL },
          "tributary-train: --observers must be an integer in 1..32, not '0' (see tributary-train --help)\n" },
        { { "--mode", "fast", NULL },
          "tributary-train: --mode must be sync or async, not 'fast' (see tributary-train --help)\n" },
        { { "--seed", "-1", NULL },
          "tributary-train: --seed must be a non-negative integer, not '-1' (see tributary-train --help)\n" },
        { { "--log-every", "0", NULL },
          "tributary-train: --log-every must be a positive integer, not '0' (see tributary-train --help)\n" },
        { { "--target", "x", NULL }, "tributary-train: --target must be a number, not 'x' (see tributary-train --help)\n" },
        { { "--max-iters", NULL }, "tributary-train: option '--max-iters' needs a value (see tributary-train --help)\n" },
        { { "extra", NULL }, "tributary-train: unexpected argument 'extra' (see tributary-train --help)\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_train(cases[i].args, OUT, ERR, sizeof OUT);
        ck_assert_msg(rc == 2, "case %zu: exit %d", i, rc);
        ck_assert_str_eq(ERR, cases[i].err);
        ck_assert_str_eq(OUT, "");
    }
}
END_TEST

static Suite *rl_train_suite(void)
{
    Suite *s = suite_create("rl_train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_train_two_observers);
    tcase_add_test(tc, test_train_async);
    tcase_add_test(tc, test_not_solved_exits_1);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_bad_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rl_train_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
