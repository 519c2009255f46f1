/* trib-netdelay: a point-to-point IP link between two TUN devices that holds
 * every packet for a fixed one-way delay, for scripts/bench modes on kernels
 * without the netem qdisc (sch_netem). The script moves one device into a
 * network namespace and addresses both ends; this program only forwards.
 *   trib-netdelay --dev-a NAME --dev-b NAME --delay-us D
 * Prints "ready" on stdout once both devices exist, then forwards until
 * SIGTERM/SIGINT, and prints one line of counters on stderr at exit
 * (packets and bytes each way, drops, and how late the releases were). Runs
 * with SCHED_FIFO when allowed so a loaded machine does not stretch the delay
 * (netem runs in softirq context, ahead of every task, too). Linux only. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define SLOT_BYTES 2048     /* > the TUN MTU (1500): TUN without GSO hands over whole IP packets */
#define QUEUE_SLOTS 8192    /* per direction; a full queue drops, as netem's limit does */

struct slot {
    int64_t due_ns;
    uint16_t len;
    unsigned char data[SLOT_BYTES];
};

/* Packets read from one device, waiting to be written to the other. A fixed
 * delay keeps release order equal to arrival order, so a ring is enough. */
struct queue {
    struct slot *s;
    int head, n;
    uint64_t packets, bytes, drops;
    double late_sum_ns, late_max_ns;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

static void die(const char *what)
{
    fprintf(stderr, "trib-netdelay: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int tun_open(const char *name)
{
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die("open /dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    if (strlen(name) >= IFNAMSIZ) {
        fprintf(stderr, "trib-netdelay: device name '%s' is longer than %d characters\n", name, IFNAMSIZ - 1);
        exit(2);
    }
    memcpy(ifr.ifr_name, name, strlen(name));
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) die(name);
    return fd;
}

/* Reads every packet waiting on fd into q, due delay_ns from now. */
static void drain(int fd, struct queue *q, int64_t delay_ns)
{
    for (;;) {
        unsigned char buf[SLOT_BYTES];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return;
            die("read");
        }
        if (n == 0) return;
        if (q->n == QUEUE_SLOTS) {
            q->drops++;
            continue;
        }
        struct slot *s = &q->s[(q->head + q->n) % QUEUE_SLOTS];
        s->due_ns = trib_now_ns() + delay_ns;
        s->len = (uint16_t)n;
        memcpy(s->data, buf, (size_t)n);
        q->n++;
    }
}

/* Writes every packet of q that is due to fd. */
static void release(int fd, struct queue *q, int64_t t)
{
    while (q->n > 0 && q->s[q->head].due_ns <= t) {
        struct slot *s = &q->s[q->head];
        ssize_t w = write(fd, s->data, s->len);
        if (w < 0 && errno != EAGAIN && errno != EINVAL && errno != EIO) die("write");
        if (w == (ssize_t)s->len) {
            q->packets++;
            q->bytes += s->len;
        } else {
            q->drops++;
        }
        double late = (double)(t - s->due_ns);
        q->late_sum_ns += late;
        if (late > q->late_max_ns) q->late_max_ns = late;
        q->head = (q->head + 1) % QUEUE_SLOTS;
        q->n--;
    }
}

int main(int argc, char **argv)
{
    const char *dev_a = NULL, *dev_b = NULL;
    long delay_us = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dev-a") == 0 && i + 1 < argc) dev_a = argv[++i];
        else if (strcmp(argv[i], "--dev-b") == 0 && i + 1 < argc) dev_b = argv[++i];
        else if (strcmp(argv[i], "--delay-us") == 0 && i + 1 < argc) delay_us = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: trib-netdelay --dev-a NAME --dev-b NAME --delay-us D\n");
            return 2;
        }
    }
    if (!dev_a || !dev_b || delay_us < 0 || delay_us > 10000000) {
        fprintf(stderr, "usage: trib-netdelay --dev-a NAME --dev-b NAME --delay-us D (0..10000000)\n");
        return 2;
    }
    const int64_t delay_ns = (int64_t)delay_us * 1000;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct sched_param sp = { .sched_priority = 10 };
    int rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    int fd[2] = { tun_open(dev_a), tun_open(dev_b) };
    struct queue q[2];   /* q[0]: a -> b, q[1]: b -> a */
    memset(q, 0, sizeof q);
    for (int i = 0; i < 2; i++)
        if (!(q[i].s = malloc(sizeof(struct slot) * QUEUE_SLOTS))) die("malloc");
    printf("ready\n");
    fflush(stdout);

    while (!stop) {
        int64_t t = trib_now_ns(), next = -1;
        for (int i = 0; i < 2; i++)
            if (q[i].n > 0 && (next < 0 || q[i].s[q[i].head].due_ns < next)) next = q[i].s[q[i].head].due_ns;
        struct timespec to, *top = NULL;
        if (next >= 0) {
            int64_t wait = next > t ? next - t : 0;
            to.tv_sec = wait / 1000000000;
            to.tv_nsec = wait % 1000000000;
            top = &to;
        }
        struct pollfd p[2] = { { .fd = fd[0], .events = POLLIN }, { .fd = fd[1], .events = POLLIN } };
        int r = ppoll(p, 2, top, NULL);
        if (r < 0 && errno != EINTR) die("ppoll");
        for (int i = 0; i < 2 && r > 0; i++)
            if (p[i].revents & POLLIN) drain(fd[i], &q[i], delay_ns);
        t = trib_now_ns();
        release(fd[1], &q[0], t);
        release(fd[0], &q[1], t);
    }

    fprintf(stderr,
            "trib-netdelay: delay %ld us%s; a->b %llu packets %llu bytes %llu drops, late mean %.1f max %.1f us; "
            "b->a %llu packets %llu bytes %llu drops, late mean %.1f max %.1f us\n",
            delay_us, rt ? " (SCHED_FIFO)" : "", (unsigned long long)q[0].packets, (unsigned long long)q[0].bytes,
            (unsigned long long)q[0].drops, q[0].packets ? q[0].late_sum_ns / 1e3 / (double)q[0].packets : 0.0,
            q[0].late_max_ns / 1e3, (unsigned long long)q[1].packets, (unsigned long long)q[1].bytes,
            (unsigned long long)q[1].drops, q[1].packets ? q[1].late_sum_ns / 1e3 / (double)q[1].packets : 0.0,
            q[1].late_max_ns / 1e3);
    for (int i = 0; i < 2; i++) {
        free(q[i].s);
        close(fd[i]);
    }
    return 0;
}
