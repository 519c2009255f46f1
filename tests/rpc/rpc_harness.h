/* Multi-process harness for the RPC tests: forks worker processes before
 * the parent (rank 0) starts its agent on a free loopback port, hands them
 * the real endpoint through pipes, and always reaps them. */
#ifndef TRIB_TESTS_RPC_HARNESS_H
#define TRIB_TESTS_RPC_HARNESS_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* _exit skips LeakSanitizer's atexit check: run it by hand in children. */
static inline int h_leak_check(void) { return __lsan_do_recoverable_leak_check() ? 1 : 0; }
#else
static inline int h_leak_check(void) { return 0; }
#endif

#define H_MAX 8

struct harness {
    int n;                      /* children */
    pid_t pid[H_MAX];
    int fd[H_MAX];              /* write ends */
};

/* Child body: returns the exit code. `master` is rank 0's endpoint. */
typedef int (*child_fn)(int idx, const char *master, void *arg);

static inline void h_spawn(struct harness *h, int n, child_fn fn, void *arg)
{
    h->n = n;
    for (int i = 0; i < n; i++) {
        int p[2];
        if (pipe(p) != 0) abort();
        fflush(stdout);                         /* nothing buffered twice */
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) abort();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);     /* never outlive the test */
            close(p[1]);
            for (int j = 0; j < i; j++) close(h->fd[j]);
            char ep[128];
            size_t got = 0;
            while (got < sizeof ep) {
                ssize_t r = read(p[0], ep + got, sizeof ep - got);
                if (r <= 0) _exit(99);
                got += (size_t)r;
            }
            ep[sizeof ep - 1] = '\0';
            close(p[0]);
            int rc = fn(i, ep, arg);
            if (rc == 0 && h_leak_check()) rc = 98;
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        close(p[0]);
        h->pid[i] = pid;
        h->fd[i] = p[1];
    }
}

/* Sends the endpoint to child i (or all when i < 0). */
static inline void h_go(struct harness *h, int i, const char *endpoint)
{
    char ep[128] = { 0 };
    snprintf(ep, sizeof ep, "%s", endpoint);
    for (int k = 0; k < h->n; k++) {
        if (i >= 0 && k != i) continue;
        if (h->fd[k] < 0) continue;
        ssize_t w = write(h->fd[k], ep, sizeof ep);
        (void)w;
        close(h->fd[k]);
        h->fd[k] = -1;
    }
}

/* Waits for child i up to timeout_s (then kills it); returns its exit code,
 * 128+signal if killed by a signal, or -1 on timeout. */
static inline int h_reap(struct harness *h, int i, double timeout_s)
{
    if (h->pid[i] <= 0) return 0;
    double t0 = trib_now_s();
    int st = 0;
    for (;;) {
        pid_t r = waitpid(h->pid[i], &st, WNOHANG);
        if (r == h->pid[i]) break;
        if (trib_now_s() - t0 > timeout_s) {
            kill(h->pid[i], SIGKILL);
            waitpid(h->pid[i], &st, 0);
            h->pid[i] = 0;
            return -1;
        }
        usleep(2000);
    }
    h->pid[i] = 0;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

/* Closes unsent pipes (children exit 99) and reaps everyone. */
static inline void h_abort(struct harness *h)
{
    for (int k = 0; k < h->n; k++)
        if (h->fd[k] >= 0) { close(h->fd[k]); h->fd[k] = -1; }
    for (int k = 0; k < h->n; k++) h_reap(h, k, 10);
}

#endif
