/* common/text.h and common/crash_note.h: a peer's text escaped for a log
 * line (every byte that is not printable ASCII as \xNN, cut at a whole
 * character, a second pass a no-op); and a crash inside a crash note
 * printing its line before the process dies of the signal (a real child
 * process, its stderr in a pipe). */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crash_note.h"
#include "common/text.h"
#include "kit.h"

START_TEST(test_escape)
{
    char out[TEXT_ESCAPED_CAP(64)];
    const char in[] = "a\nb\r\x1b[2K\x7f\xc3\xa9 \\x0a\t";
    text_escape(out, sizeof out, in, sizeof in - 1);
    ck_assert_str_eq(out, "a\\x0ab\\x0d\\x1b[2K\\x7f\\xc3\\xa9 \\x0a\\x09");
    /* a second pass leaves it as it is: escaped twice reads the same */
    char again[sizeof out];
    text_escape(again, sizeof again, out, strlen(out));
    ck_assert_str_eq(again, out);
    /* NULs are bytes like the others */
    text_escape(out, sizeof out, "x\0y", 3);
    ck_assert_str_eq(out, "x\\x00y");
}
END_TEST

START_TEST(test_escape_cut)
{
    char out[8];
    /* "ab" + "\x0a" is 6 bytes; the next escape does not fit whole in 7 */
    text_escape(out, sizeof out, "ab\n\n", 4);
    ck_assert_str_eq(out, "ab\\x0a");
    text_escape(out, 1, "abc", 3);
    ck_assert_str_eq(out, "");
    text_escape(out, sizeof out, "abcdefghij", 10);
    ck_assert_str_eq(out, "abcdefg");
}
END_TEST

/* A child that crashes (sig) inside a crash note, or after it ended
 * (ended): its stderr and how it died. */
static void crash_child(int sig, bool ended, char *err, size_t cap, int *status)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        signal(sig, SIG_DFL);
        crash_note_begin("prog", "running %s's unload", "x.so");
        if (ended) crash_note_end();
        raise(sig);
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(p[0], err + n, cap - 1 - n)) > 0) n += (size_t)k;
    err[n] = '\0';
    close(p[0]);
    ck_assert_int_eq(waitpid(pid, status, 0), pid);
}

START_TEST(test_crash_note)
{
    char err[1024];
    int st;
    crash_child(SIGSEGV, false, err, sizeof err, &st);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "status 0x%x", st);
    ck_assert_str_eq(err, "prog: crashed (signal 11, SIGSEGV) while running x.so's unload\n");
    crash_child(SIGABRT, false, err, sizeof err, &st);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status 0x%x", st);
    ck_assert_str_eq(err, "prog: crashed (signal 6, SIGABRT) while running x.so's unload\n");
    /* after crash_note_end: the handler that was there before (the default) */
    crash_child(SIGSEGV, true, err, sizeof err, &st);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "status 0x%x", st);
    ck_assert_str_eq(err, "");
}
END_TEST

KIT_MAIN("text",
         { "text", 0, .tests = { test_escape, test_escape_cut, test_crash_note } })
