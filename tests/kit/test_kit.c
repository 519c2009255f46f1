/* The shared test kit itself (kit.h): scratch directories made and removed
 * whatever a test left in them, whole files with their NULs, a child's
 * output read from offset 0, programs run with their output and status
 * (a signal, a timeout), and waits that end when the condition holds or
 * when the deadline passes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kit.h"

static void put(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* A scratch directory holding a read-only subdirectory with a file, a
 * symlink out of it and a FIFO is removed whole; the link's target stays. */
START_TEST(test_scratch_removed_whole)
{
    char dir[64], outside[64];
    kit_must_scratch(dir, sizeof dir, "trib-kit-");
    kit_must_scratch(outside, sizeof outside, "trib-kit-out-");
    ck_assert_int_eq(strncmp(dir, "/tmp/trib-kit-", 14), 0);
    put(kit_path(outside, "keep"), "k", 1);
    ck_assert_int_eq(mkdir(kit_path(dir, "sub"), 0700), 0);
    put(kit_path(dir, "sub/f"), "x", 1);
    ck_assert_int_eq(symlink(outside, kit_path(dir, "link")), 0);
    ck_assert_int_eq(mkfifo(kit_path(dir, "fifo"), 0600), 0);
    ck_assert_int_eq(chmod(kit_path(dir, "sub"), 0500), 0);
    ck_assert_int_eq(chmod(dir, 0500), 0);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    ck_assert_int_eq(access(dir, F_OK), -1);
    ck_assert_int_eq(access(kit_path(outside, "keep"), F_OK), 0);
    ck_assert_int_eq(kit_rm_rf(dir), 0);            /* gone already: not an error */
    ck_assert_int_eq(kit_rm_rf(outside), 0);
}
END_TEST

/* kit_path keeps 8 results apart, and cuts a long one. */
START_TEST(test_path_buffers)
{
    const char *p[8];
    char want[32];
    for (int i = 0; i < 8; i++) {
        snprintf(want, sizeof want, "n%d", i);
        p[i] = kit_path("/d", want);
    }
    for (int i = 0; i < 8; i++) {
        snprintf(want, sizeof want, "/d/n%d", i);
        ck_assert_str_eq(p[i], want);
    }
    char name[2000];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    ck_assert_uint_eq(strlen(kit_path("/d", name)), 1023);
}
END_TEST

/* A whole file, NULs and all, longer than one read; a missing one is NULL
 * with ENOENT; an empty one is "". */
START_TEST(test_read_file)
{
    char dir[64];
    kit_must_scratch(dir, sizeof dir, "trib-kit-");
    enum { N = 100000 };
    unsigned char *data = malloc(N);
    for (int i = 0; i < N; i++) data[i] = (unsigned char)(i * 7);
    put(kit_path(dir, "bin"), data, N);
    size_t n = 0;
    char *got = kit_must_read_in(dir, "bin", &n);
    ck_assert_uint_eq(n, N);
    ck_assert_int_eq(memcmp(got, data, N), 0);
    ck_assert_int_eq(got[N], '\0');
    free(got);
    errno = 0;
    ck_assert_ptr_null(kit_read_file(kit_path(dir, "missing"), &n));
    ck_assert_int_eq(errno, ENOENT);
    put(kit_path(dir, "empty"), "", 0);
    got = kit_must_read(kit_path(dir, "empty"), &n);
    ck_assert_uint_eq(n, 0);
    ck_assert_str_eq(got, "");
    free(got);
    free(data);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
}
END_TEST

/* A file missing fails the test, naming it. */
START_TEST(test_must_read_fails_naming_path)
{
    kit_must_read("/nonexistent/trib-kit-file", NULL);
}
END_TEST

/* What was written to an fd, from offset 0, wherever its offset stands,
 * which it leaves where it was. */
START_TEST(test_read_fd_from_start)
{
    char path[] = "/tmp/trib-kit-fd-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(write(fd, "hello\nworld\n", 12), 12);
    size_t n;
    char *s = kit_must_read_fd(fd, &n);
    ck_assert_uint_eq(n, 12);
    ck_assert_str_eq(s, "hello\nworld\n");
    ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 12);
    free(s);
    close(fd);
}
END_TEST

/* kit_run: the exit code, stdout and stderr apart, more arguments than a
 * fixed argv would hold, 128 + the signal, -1 past the timeout. */
START_TEST(test_run)
{
    const char *a[] = { "-c", "printf out; printf err >&2; exit 3", NULL };
    ck_assert_int_eq(kit_run("/bin/sh", a, 30), 3);
    ck_assert_str_eq(kit_out, "out");
    ck_assert_str_eq(kit_err, "err");
    const char *many[202] = { "-c", "echo $#", "sh" };
    for (int i = 3; i < 201; i++) many[i] = "x";
    ck_assert_int_eq(kit_run("/bin/sh", many, 30), 0);
    ck_assert_str_eq(kit_out, "198\n");
    const char *k[] = { "-c", "kill -TERM $$", NULL };
    ck_assert_int_eq(kit_run("/bin/sh", k, 30), 128 + SIGTERM);
    const char *hang[] = { "-c", "exec sleep 60", NULL };
    double t0 = kit_now_s();
    ck_assert_int_eq(kit_run("/bin/sh", hang, 0.3), -1);
    ck_assert_double_lt(kit_now_s() - t0, 30);
    char out[8], err[8];
    const char *big[] = { "-c", "echo 0123456789", NULL };
    ck_assert_int_eq(kit_run_into("/bin/sh", big, 30, out, err, sizeof out), 0);
    ck_assert_str_eq(out, "0123456");
    ck_assert_str_eq(err, "");
}
END_TEST

/* A program that cannot start fails the test, naming it. */
START_TEST(test_run_fails_naming_program)
{
    kit_run("/nonexistent/trib-kit-prog", NULL, 5);
}
END_TEST

static atomic_int ticks;

static void *ticker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        kit_nap_us(2000);
        atomic_fetch_add(&ticks, 1);
    }
    return NULL;
}

static bool five_ticks(void *arg)
{
    (void)arg;
    return atomic_load(&ticks) >= 5;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

/* A wait ends when its condition holds, another thread making it true; a
 * wait on what never holds returns false once its deadline has passed. */
START_TEST(test_wait)
{
    pthread_t t;
    atomic_store(&ticks, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, ticker, NULL), 0);
    ck_assert(kit_wait_until(five_ticks, NULL, 30));
    pthread_join(t, NULL);
    atomic_store(&ticks, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, ticker, NULL), 0);
    KIT_WAIT(atomic_load(&ticks) >= 5, 30, "five ticks");
    pthread_join(t, NULL);
    double t0 = kit_now_s();
    ck_assert(!kit_wait_until(never, NULL, 0.2));
    ck_assert_double_ge(kit_now_s() - t0, 0.2);
}
END_TEST

/* KIT_WAIT on what never holds fails the test, naming what it waited for. */
START_TEST(test_wait_fails_naming_condition)
{
    KIT_WAIT(never(NULL), 0.1, "the never condition");
}
END_TEST

/* The three above, run by a runner of their own, fail, each naming what it
 * could not do. */
START_TEST(test_failures_name_what)
{
    static const struct { const TTest **test; const char *want; } cases[] = {
        { &test_must_read_fails_naming_path, "reading /nonexistent/trib-kit-file: No such file or directory" },
        { &test_run_fails_naming_program, "starting /nonexistent/trib-kit-prog: " },
        { &test_wait_fails_naming_condition, "waited 0 s for the never condition" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Suite *s = suite_create("failing");
        TCase *tc = tcase_create("failing");
        tcase_add_test(tc, *cases[i].test);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_FORK);
        srunner_run_all(sr, CK_SILENT);
        ck_assert_int_eq(srunner_ntests_failed(sr), 1);
        TestResult **r = srunner_failures(sr);
        const char *msg = tr_msg(r[0]);
        ck_assert_msg(strstr(msg, cases[i].want) != NULL, "%s: got \"%s\"", cases[i].want, msg);
        free(r);
        srunner_free(sr);
    }
}
END_TEST

KIT_MAIN("kit",
         { "kit", 60, .tests = { test_scratch_removed_whole, test_path_buffers, test_read_file,
                                 test_read_fd_from_start, test_run, test_wait, test_failures_name_what } })
