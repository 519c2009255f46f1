/* Child processes for tributary-train, the multi-process tests and the
 * benches: fork a function or spawn a program, hand forked children the
 * rendezvous endpoint through a pipe, wait with a timeout, kill and reap
 * them all. Rank 0 learns its endpoint only once it listens (port 0), and
 * children must be forked before rpc_init starts threads, so a forked
 * child blocks on its pipe until proc_hand_out. Below every layer, like
 * check.h; single-threaded use (one thread owns a group). */
#ifndef TRIB_COMMON_PROC_H
#define TRIB_COMMON_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PROC_MAX 64
/* Bytes of an endpoint handed out (NUL-padded; longer ones are cut). */
#define PROC_ENDPOINT_MAX 128

struct proc {
    pid_t pid;
    bool reaped;
    int status;                     /* once reaped: the exit code, 128 + the signal
                                       that ended it, or -1 if killed past a timeout */
    int sig;                        /* once reaped: the signal that ended it, 0 if it exited */
    int go_fd;                      /* a forked child's endpoint pipe, -1 once handed out */
    int out_fd, err_fd;             /* captured stdout/stderr (unlinked files), or -1 */
};

/* Caller-owned: proc_group_init before use, proc_group_deinit after. */
struct proc_group {
    int n;
    struct proc p[PROC_MAX];
};

void proc_group_init(struct proc_group *g);
/* SIGKILLs and reaps every child not yet reaped, closes every pipe and
 * captured file; g is empty afterwards. Never blocks for long. */
void proc_group_deinit(struct proc_group *g);

/* A forked child's body: idx is its index in the group, endpoint what
 * proc_hand_out gave it. Returns the child's exit code. */
typedef int (*proc_fn)(int idx, const char *endpoint, void *arg);

enum {
    PROC_IGNORE_SIGINT = 1 << 0,    /* Ctrl-C reaches the parent only, which stops the children */
    PROC_LEAK_CHECK = 1 << 1,       /* under ASan, a child returning 0 runs LeakSanitizer's
                                       check (_exit skips it) and exits 98 on a leak */
};

/* Forks a child into g that waits for its endpoint (proc_hand_out), runs
 * fn and _exits with its return (99 if the pipe closes first: the parent
 * gave up before listening). The child dies with the parent. Returns its
 * index, or -1 with errno set (EAGAIN: the group is full; pipe or fork
 * failed). */
int proc_fork(struct proc_group *g, proc_fn fn, void *arg, unsigned flags);

/* Hands endpoint to forked child i (i < 0: every one still waiting). */
void proc_hand_out(struct proc_group *g, int i, const char *endpoint);
/* The same to every child, in the shape of a listening callback
 * (rpc_opts.on_listening, with listening_user = the group). */
void proc_hand_out_all(const char *endpoint, void *group);

enum proc_stream { PROC_INHERIT, PROC_DISCARD, PROC_CAPTURE };

/* Starts the program argv[0] with argv (NULL-terminated) and this
 * environment; its stdout and stderr are inherited, sent to /dev/null or
 * captured in unlinked files (read with proc_output). It starts with no
 * signal blocked and SIGINT, SIGTERM and SIGPIPE at their defaults,
 * whatever this process does with them. Returns its index, or -1 with
 * errno set. */
int proc_spawn(struct proc_group *g, const char *const *argv, enum proc_stream out, enum proc_stream err);
/* The same with the environment envp ("K=V", NULL-terminated; NULL: this
 * one) and stdin `in`: PROC_INHERIT, or PROC_DISCARD for /dev/null
 * (PROC_CAPTURE is EINVAL). */
int proc_spawn_env(struct proc_group *g, const char *const *argv, const char *const *envp, enum proc_stream in,
                   enum proc_stream out, enum proc_stream err);

/* Copies what child i has written so far to its captured stdout (fd 1) or
 * stderr (fd 2) into buf (NUL-terminated, cut at cap - 1 bytes); returns
 * its length. Works while the child runs, and after it is reaped. */
size_t proc_output(const struct proc_group *g, int i, int fd, char *buf, size_t cap);

/* Runs the program argv[0] with argv (NULL-terminated) in a group of its
 * own, stdout and stderr captured: waits for it at most timeout_s (< 0: no
 * limit; then SIGKILLed), copies what it wrote into out and err (as
 * proc_output; either may be NULL) and reaps it. 0 with *status as
 * proc_wait returns it, or -1 with errno set when it could not start. */
int proc_run(const char *const *argv, double timeout_s, char *out, size_t out_cap, char *err, size_t err_cap,
             int *status);

/* Waits for child i at most timeout_s (< 0: no limit), then SIGKILLs it.
 * Returns its status (struct proc); a child already reaped returns it
 * again. */
int proc_wait(struct proc_group *g, int i, double timeout_s);

/* Waits at most timeout_s (< 0: no limit) for any child not yet reaped to
 * end, and reaps it. Returns its index, or -1 on timeout or when every
 * child is reaped already. Kills nothing. */
int proc_wait_any(struct proc_group *g, double timeout_s);

/* Closes the endpoint pipes not yet handed out (those children exit 99),
 * waits for every child not yet reaped, all within timeout_s, and SIGKILLs
 * what is left. Returns how many of the children reaped here did not exit 0. */
int proc_reap_all(struct proc_group *g, double timeout_s);

/* A TCP port on 127.0.0.1 that was free when this returns (bound to port 0
 * and read back; another process may take it before the caller binds it).
 * Returns -1 with errno set if no socket could be bound. */
int proc_free_port(void);

#endif
