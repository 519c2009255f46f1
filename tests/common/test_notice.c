/* common/notice.h on a real thread, its stderr in a file: a wait says
 * what it waits for ("PREFIX: waiting for WHAT (N s so far)"), and says
 * nothing once its `done` test is true. */
#define _GNU_SOURCE
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/notice.h"
#include "kit.h"

/* stderr into a new file, removed at once (each test runs in its own
 * process; a failing one leaves nothing behind). */
static void capture(void)
{
    char path[] = "/tmp/trib-notice-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
}

/* What was written to stderr so far. */
static char *captured(void)
{
    fflush(stderr);
    static char buf[4096];
    ssize_t n = pread(2, buf, sizeof buf - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_says_what_it_waits_for)
{
    struct notice *n = notice_start("agent", "the observers", 0, NULL, NULL);
    /* the seconds so far are 0 unless the machine is slow to run the thread */
    const char *want = "agent: waiting for the observers (", *tail = " s so far)\n";
    double t0 = trib_now_s();
    while (!strstr(captured(), tail) && trib_now_s() - t0 < 30) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    notice_stop(n);
    const char *got = captured(), *end = strstr(got, tail);
    ck_assert_msg(strncmp(got, want, strlen(want)) == 0 && end && strspn(got + strlen(want), "0123456789") ==
                  (size_t)(end - got - strlen(want)), "stderr: \"%s\"", got);
    notice_stop(NULL);
}
END_TEST

static atomic_int asked;

static bool done_now(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
    return true;
}

/* Due at once (first_s 0), but done from the first time it asks: nothing
 * is said, though the thread has asked before it was stopped. */
START_TEST(test_done_says_nothing)
{
    struct notice *n = notice_start("agent", "the observers", 0, done_now, &asked);
    double t0 = trib_now_s();
    while (atomic_load(&asked) == 0 && trib_now_s() - t0 < 30) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(atomic_load(&asked) == 1, "done was not asked within 30 s");
    notice_stop(n);
    ck_assert_str_eq(captured(), "");
}
END_TEST

KIT_MAIN("notice",
         { "notice", 0, .setup = capture, .tests = { test_says_what_it_waits_for, test_done_says_nothing } })
