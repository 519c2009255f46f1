/* Crash signals and the last-word thread (last_word.h). The handler only
 * writes to a pipe, polls another and re-raises: async-signal-safe; the
 * words themselves are said on an ordinary thread. */
#define _GNU_SOURCE
#include "rl/last_word.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rl/rl.h"

static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };

static void (*say)(int sig, void *user);
static void *say_user;
static int to_thread[2] = { -1, -1 }, from_thread[2] = { -1, -1 };
static atomic_int entered;

bool rl_is_crash_signal(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT || sig == SIGSYS ||
           sig == SIGTRAP;
}

void rl_describe_end(int sig, int status, char *out, size_t cap)
{
    if (!sig) {
        snprintf(out, cap, "exited with status %d", status);
        return;
    }
    const char *abbrev = sigabbrev_np(sig);
    snprintf(out, cap, "%s (signal %d, SIG%s)", rl_is_crash_signal(sig) ? "crashed" : "was killed", sig,
             abbrev ? abbrev : "?");
}

static void on_crash(int sig)
{
    /* one crash speaks; any other (in the last word itself too) dies at once */
    if (atomic_exchange(&entered, 1) == 0) {
        unsigned char b = (unsigned char)sig;
        if (write(to_thread[1], &b, 1) == 1) {
            struct pollfd p = { .fd = from_thread[0], .events = POLLIN };
            while (poll(&p, 1, RL_LAST_WORD_MS) < 0 && errno == EINTR) {}
        }
    }
    /* the default action: pending while this handler runs (the signal is
     * blocked here), delivered when it returns; a fault that returns to its
     * instruction faults again, now fatally */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void *speaker(void *arg)
{
    (void)arg;
    unsigned char b;
    ssize_t r;
    while ((r = read(to_thread[0], &b, 1)) < 0 && errno == EINTR) {}
    if (r == 1) {
        say(b, say_user);
        unsigned char done = 1;
        (void)!write(from_thread[1], &done, 1);
    }
    return NULL;
}

int rl_last_word_install(void (*fn)(int sig, void *user), void *user)
{
    if (say == fn && say_user == user) return 0;   /* installed already */
    if (say) return rl_set_error("last word: installed already for another speaker");
    if (pipe2(to_thread, O_CLOEXEC) != 0 || pipe2(from_thread, O_CLOEXEC) != 0)
        return rl_set_error("last word: pipe: %s", strerror(errno));
    say = fn;
    say_user = user;
    /* the speaker blocks every signal: a crash is handled on its own thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int e = pthread_create(&t, NULL, speaker, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) return rl_set_error("last word: thread: %s", strerror(e));
    pthread_detach(t);
    struct sigaction sa = { .sa_handler = on_crash };
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++) sigaction(crash_signals[i], &sa, NULL);
    return 0;
}
