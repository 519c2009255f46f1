/* Child processes: forked functions that wait for the rendezvous endpoint,
 * spawned programs with optional output capture, waiting with a timeout
 * and reaping (proc.h). */
#define _GNU_SOURCE
#include "common/proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static bool leaked(void) { return __lsan_do_recoverable_leak_check() != 0; }
#else
static bool leaked(void) { return false; }
#endif

extern char **environ;

void proc_group_init(struct proc_group *g)
{
    g->n = 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* A new slot, or NULL with errno EAGAIN. */
static struct proc *slot(struct proc_group *g)
{
    if (g->n >= PROC_MAX) {
        errno = EAGAIN;
        return NULL;
    }
    struct proc *p = &g->p[g->n];
    *p = (struct proc){ .go_fd = -1, .out_fd = -1, .err_fd = -1 };
    return p;
}

/* ---- forked functions ---------------------------------------------------------- */

/* In the child: blocks until the endpoint arrives; false if the pipe closed. */
static bool read_endpoint(int fd, char ep[PROC_ENDPOINT_MAX])
{
    size_t got = 0;
    while (got < PROC_ENDPOINT_MAX) {
        ssize_t r = read(fd, ep + got, PROC_ENDPOINT_MAX - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += (size_t)r;
    }
    ep[PROC_ENDPOINT_MAX - 1] = '\0';
    return true;
}

int proc_fork(struct proc_group *g, proc_fn fn, void *arg, unsigned flags)
{
    struct proc *p = slot(g);
    if (!p) return -1;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);                         /* nothing buffered twice */
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the parent */
        if (getppid() != parent) _exit(1);  /* it died before prctl */
        if (flags & PROC_IGNORE_SIGINT) signal(SIGINT, SIG_IGN);
        close(fds[1]);
        /* The siblings' write ends: a sibling must see EOF when the parent closes its pipe. */
        for (int j = 0; j < g->n; j++) close_fd(&g->p[j].go_fd);
        char ep[PROC_ENDPOINT_MAX];
        bool ok = read_endpoint(fds[0], ep);
        close(fds[0]);
        if (!ok) _exit(99);
        int rc = fn(g->n, ep, arg);
        if (rc == 0 && (flags & PROC_LEAK_CHECK) && leaked()) rc = 98;
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(fds[0]);
    p->pid = pid;
    p->go_fd = fds[1];
    return g->n++;
}

void proc_hand_out_all(const char *endpoint, void *group) { proc_hand_out(group, -1, endpoint); }

void proc_hand_out(struct proc_group *g, int i, const char *endpoint)
{
    char ep[PROC_ENDPOINT_MAX] = { 0 };
    snprintf(ep, sizeof ep, "%s", endpoint);
    for (int k = 0; k < g->n; k++) {
        if ((i >= 0 && k != i) || g->p[k].go_fd < 0) continue;
        ssize_t w = write(g->p[k].go_fd, ep, sizeof ep);   /* short only if the child is gone */
        (void)w;
        close_fd(&g->p[k].go_fd);
    }
}

/* ---- spawned programs ------------------------------------------------------------ */

/* An unlinked temporary file: nothing is left behind however the run ends. */
static int anon_file(void)
{
    char path[] = "/tmp/trib_proc_XXXXXX";
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    return fd;
}

/* Sets up child fd `fd` as `how` says; 0 or -1 (errno). */
static int stream_action(posix_spawn_file_actions_t *fa, int fd, enum proc_stream how, int *captured)
{
    if (how == PROC_DISCARD) return posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_WRONLY, 0) == 0 ? 0 : -1;
    if (how != PROC_CAPTURE) return 0;
    *captured = anon_file();
    if (*captured < 0) return -1;
    return posix_spawn_file_actions_adddup2(fa, *captured, fd) == 0 ? 0 : -1;
}

int proc_spawn(struct proc_group *g, const char *const *argv, enum proc_stream out, enum proc_stream err)
{
    return proc_spawn_env(g, argv, NULL, PROC_INHERIT, out, err);
}

int proc_spawn_env(struct proc_group *g, const char *const *argv, const char *const *envp, enum proc_stream in,
                   enum proc_stream out, enum proc_stream err)
{
    if (in == PROC_CAPTURE) {
        errno = EINVAL;
        return -1;
    }
    struct proc *p = slot(g);
    if (!p) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* Signals as a fresh program expects them, whatever this process does. */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = -1;
    bool ok = in != PROC_DISCARD || posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0;
    if (ok && stream_action(&fa, 1, out, &p->out_fd) == 0 && stream_action(&fa, 2, err, &p->err_fd) == 0) {
        rc = posix_spawn(&p->pid, argv[0], &fa, &at, (char *const *)argv, envp ? (char *const *)envp : environ);
        if (rc != 0) errno = rc;
    }
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        int e = errno;
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
        errno = e;
        return -1;
    }
    return g->n++;
}

size_t proc_output(const struct proc_group *g, int i, int fd, char *buf, size_t cap)
{
    int from = fd == 1 ? g->p[i].out_fd : g->p[i].err_fd;
    size_t n = 0;
    while (from >= 0 && n + 1 < cap) {
        ssize_t k = pread(from, buf + n, cap - 1 - n, (off_t)n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    if (cap) buf[n] = '\0';
    return n;
}

/* ---- waiting --------------------------------------------------------------------- */

static void reaped(struct proc *p, int st)
{
    p->reaped = true;
    p->sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + p->sig;
}

/* Waits for p until the monotonic time deadline (< 0: none), then
 * SIGKILLs it; its status, -1 if killed here. */
static int wait_until(struct proc *p, double deadline)
{
    if (p->reaped) return p->status;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            reaped(p, st);
            return p->status;
        }
        if (r < 0 && errno != EINTR) {      /* not our child any more: nothing to wait for */
            p->reaped = true;
            p->status = -1;
            return -1;
        }
        if (deadline >= 0 && trib_now_s() > deadline) {
            kill(p->pid, SIGKILL);
            while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
            reaped(p, st);
            p->status = -1;
            return -1;
        }
        usleep(2000);
    }
}

int proc_wait(struct proc_group *g, int i, double timeout_s)
{
    return wait_until(&g->p[i], timeout_s < 0 ? -1 : trib_now_s() + timeout_s);
}

int proc_run(const char *const *argv, double timeout_s, char *out, size_t out_cap, char *err, size_t err_cap,
             int *status)
{
    struct proc_group g;
    proc_group_init(&g);
    int i = proc_spawn(&g, argv, out ? PROC_CAPTURE : PROC_DISCARD, err ? PROC_CAPTURE : PROC_DISCARD);
    if (i < 0) return -1;
    *status = proc_wait(&g, i, timeout_s);
    if (out) proc_output(&g, i, 1, out, out_cap);
    if (err) proc_output(&g, i, 2, err, err_cap);
    proc_group_deinit(&g);
    return 0;
}

int proc_wait_any(struct proc_group *g, double timeout_s)
{
    double deadline = timeout_s < 0 ? -1 : trib_now_s() + timeout_s;
    for (;;) {
        bool left = false;
        for (int k = 0; k < g->n; k++) {
            struct proc *p = &g->p[k];
            if (p->reaped) continue;
            left = true;
            int st = 0;
            pid_t r = waitpid(p->pid, &st, WNOHANG);
            if (r == p->pid) {
                reaped(p, st);
                return k;
            }
            if (r < 0 && errno != EINTR) {  /* not our child any more */
                p->reaped = true;
                p->status = -1;
                return k;
            }
        }
        if (!left || (deadline >= 0 && trib_now_s() > deadline)) return -1;
        usleep(2000);
    }
}

int proc_reap_all(struct proc_group *g, double timeout_s)
{
    for (int k = 0; k < g->n; k++) close_fd(&g->p[k].go_fd);
    double deadline = timeout_s < 0 ? -1 : trib_now_s() + timeout_s;
    int bad = 0;
    for (int k = 0; k < g->n; k++)
        if (!g->p[k].reaped && wait_until(&g->p[k], deadline) != 0) bad++;
    return bad;
}

void proc_group_deinit(struct proc_group *g)
{
    for (int k = 0; k < g->n; k++) {
        struct proc *p = &g->p[k];
        if (!p->reaped) {
            kill(p->pid, SIGKILL);
            int st = 0;
            while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
            p->reaped = true;
        }
        close_fd(&p->go_fd);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
    }
    g->n = 0;
}

int proc_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int rc = bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0 ? 0 : -1;
    int e = errno;
    close(s);
    errno = e;
    return rc == 0 ? ntohs(a.sin_port) : -1;
}
