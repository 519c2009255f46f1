/* The shared-memory link (rpc/shm.h, issue 32) between real processes:
 * messages both ways through the rings (wrapping, wire messages decoded
 * as the I/O thread decodes them), and its faults: a peer killed with
 * kill -9 halfway through writing a record, a hostile member writing
 * garbage into its own half or moving the positions, a hostile offer, a
 * stopped peer. Each bad peer's link ends with a reason naming it while
 * an honest peer's link in the same process carries on, and no segment is
 * left behind (nothing in /dev/shm, nothing mapped once closed). */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kit.h"
#include "rpc/rpc_agent.h"
#include "rpc/shm.h"

#define WAIT_MS 30000
#define RING 65536

typedef void (*child_fn)(struct shm_link *l);

/* A child process that takes the link this process offers (rings of
 * ring bytes) and runs body. */
static pid_t spawn_ring(child_fn body, struct shm_link *l, size_t ring)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        struct shm_link c;
        char err[256];
        if (shm_link_take(sv[1], WAIT_MS, &c, err, sizeof err) < 0) {
            fprintf(stderr, "child: %s\n", err);
            _exit(3);
        }
        body(&c);
        shm_link_close(&c);
        _exit(0);
    }
    close(sv[1]);
    char err[256];
    ck_assert_msg(shm_link_offer(sv[0], ring, NULL, 0, l, err, sizeof err) == 0, "%s", err);
    return pid;
}

static pid_t spawn(child_fn body, struct shm_link *l) { return spawn_ring(body, l, RING); }

static int reap(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void close_frames(zmq_msg_t *f, int n)
{
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

/* Sends back every message until a one-frame "bye". */
static void child_echo(struct shm_link *l)
{
    static zmq_msg_t f[SHM_MAX_FRAMES];
    char err[256];
    for (;;) {
        int n = shm_link_recv(l, f, SHM_MAX_FRAMES, WAIT_MS);
        if (n <= 0) _exit(4);
        bool bye = n == 1 && zmq_msg_size(&f[0]) == 3 && memcmp(zmq_msg_data(&f[0]), "bye", 3) == 0;
        if (!bye && shm_link_send(l, f, n, WAIT_MS, err, sizeof err) < 0) _exit(5);
        close_frames(f, n);
        if (bye) return;
    }
}

static void send_bytes(struct shm_link *l, const void *p, size_t n)
{
    zmq_msg_t f;
    zmq_msg_init_size(&f, n);
    memcpy(zmq_msg_data(&f), p, n);
    char err[256];
    ck_assert_msg(shm_link_send(l, &f, 1, WAIT_MS, err, sizeof err) == 0, "%s", err);
    zmq_msg_close(&f);
}

/* One round trip of a 3-frame message of `size` bytes a frame. */
static void round_trip(struct shm_link *l, size_t size, unsigned seed)
{
    zmq_msg_t out[3], in[SHM_MAX_FRAMES];
    for (int i = 0; i < 3; i++) {
        zmq_msg_init_size(&out[i], size + (size_t)i);
        unsigned char *d = zmq_msg_data(&out[i]);
        for (size_t k = 0; k < size + (size_t)i; k++) d[k] = (unsigned char)(seed * 31 + k * 7 + (size_t)i);
    }
    char err[256];
    ck_assert_msg(shm_link_send(l, out, 3, WAIT_MS, err, sizeof err) == 0, "%s", err);
    int n = shm_link_recv(l, in, SHM_MAX_FRAMES, WAIT_MS);
    ck_assert_msg(n == 3, "echo of a %zu-byte message: %d frames (%s)", size, n, l->why);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(zmq_msg_size(&in[i]), zmq_msg_size(&out[i]));
        ck_assert(memcmp(zmq_msg_data(&in[i]), zmq_msg_data(&out[i]), zmq_msg_size(&out[i])) == 0);
    }
    close_frames(out, 3);
    close_frames(in, n);
}

static void say_bye(struct shm_link *l) { send_bytes(l, "bye", 3); }

/* Segments this process still maps, and names in /dev/shm that look like ours. */
static int segments_left(void)
{
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    while (fgets(line, sizeof line, f)) n += strstr(line, "trib-shm") != NULL;
    fclose(f);
    DIR *d = opendir("/dev/shm");
    if (d) {
        for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, "trib") != NULL;
        closedir(d);
    }
    return n;
}

/* The end of a link with a live child: bye, the child exits 0, the link
 * closes, and no segment is left mapped or named. */
static void end_link(struct shm_link *l, pid_t pid)
{
    say_bye(l);
    ck_assert_int_eq(reap(pid), 0);
    shm_link_close(l);
    ck_assert_int_eq(segments_left(), 0);
}

START_TEST(test_shm_round_trips)
{
    struct shm_link l;
    pid_t pid = spawn(child_echo, &l);
    ck_assert_int_eq(segments_left(), 1);
    /* sizes that wrap the 64 KiB ring at every offset, up to half of it */
    for (unsigned k = 0; k < 400; k++) round_trip(&l, (k * 2654435761u) % 10000, k);
    round_trip(&l, 0, 1);
    /* a wire message, decoded on arrival as the I/O thread decodes one */
    struct rpc_value args = rpc_list(2);
    args.list.items[0] = rpc_int(42);
    args.list.items[1] = rpc_str("over shared memory");
    struct outmsg *m = rpc_build_msg(WIRE_REQ, 7, "echo", 1, false, 0, 0, 0, &args, NULL);
    ck_assert_ptr_nonnull(m);
    char err[256];
    ck_assert_msg(shm_link_send(&l, m->frames, m->nframes, WAIT_MS, err, sizeof err) == 0, "%s", err);
    zmq_msg_t in[SHM_MAX_FRAMES];
    int n = shm_link_recv(&l, in, SHM_MAX_FRAMES, WAIT_MS);
    ck_assert_int_eq(n, m->nframes);
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    struct wire_hdr h;
    bool answerable;
    ck_assert_msg(wire_decode(in, n, &zone, &h, &answerable, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(h.type, WIRE_REQ);
    ck_assert_uint_eq(h.req_id, 7);
    struct rpc_value back;
    static struct wire_tensors got;
    ck_assert_msg(wire_to_value(&h.payload, in + 1, n - 1, 1, &back, &got, err, sizeof err) == 0, "%s", err);
    ck_assert(rpc_value_equal(&back, &args));
    rpc_value_clear(&back);
    msgpack_zone_destroy(&zone);
    close_frames(in, n);
    rpc_outmsg_free(m);
    rpc_value_clear(&args);
    /* a message bigger than the ring is refused with the sizes, and the link goes on */
    zmq_msg_t big;
    zmq_msg_init_size(&big, RING);
    ck_assert_int_eq(shm_link_send(&l, &big, 1, WAIT_MS, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "does not fit the link's ring (65536 bytes)"), "%s", err);
    zmq_msg_close(&big);
    ck_assert(!l.dead);
    round_trip(&l, 16, 3);
    ck_assert_uint_eq(l.msgs_sent, 403);
    ck_assert_uint_eq(l.msgs_recv, 403);
    end_link(&l, pid);
}
END_TEST

/* Pages of the segment in memory (mincore: the memfd's page cache, whoever
 * touched them; each counts in the RSS of both processes that map it). */
static size_t resident_bytes(const struct shm_link *l)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = (l->map_len + page - 1) / page, n = 0;
    unsigned char *v = malloc(np);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(mincore(l->map, l->map_len, v), 0);
    for (size_t i = 0; i < np; i++) n += v[i] & 1;
    free(v);
    return n * page;
}

/* Ping-pong traffic through the default 8 MiB rings, 12 MiB each way:
 * each writer finds its ring empty and starts again at its start past
 * SHM_RESET_AT, so the link touches its first 64 KiB and a record, not all
 * 16 MiB (test_dist_contexts' RSS grew 4.7 MiB per process over 10000
 * contexts with shm forced when the writers went round the whole ring). */
START_TEST(test_shm_pages_bounded)
{
    struct shm_link l;
    pid_t pid = spawn_ring(child_echo, &l, 0);
    ck_assert_uint_eq(l.cap, (uint64_t)8 << 20);
    for (unsigned k = 0; k < 2048; k++) round_trip(&l, 2000 + k % 64, k);
    size_t res = resident_bytes(&l);
    ck_assert_msg(res <= 2 * (SHM_RESET_AT + 8192) + 4096,
                  "the link's segment holds %zu KiB in memory after 2048 round trips of 6 KB (at most %llu KiB)",
                  res >> 10, (unsigned long long)(2 * (SHM_RESET_AT + 8192) + 4096) >> 10);
    /* messages bigger than the reset point go on through the ring */
    for (unsigned k = 0; k < 20; k++) round_trip(&l, 100000 + 999 * k, k);
    ck_assert_uint_eq(l.msgs_recv, 2068);
    end_link(&l, pid);
}
END_TEST

/* kill -9 halfway through a record: its header and half its bytes are in
 * the ring, its head not yet published. */
static void child_killed_mid_write(struct shm_link *l)
{
    unsigned char rec[16 + 4 + 1000];
    memset(rec, 0xab, sizeof rec);
    uint32_t body = 4 + 4 + 1000, n = 1;
    memcpy(rec + 8, &body, 4);
    memcpy(rec + 12, &n, 4);
    memcpy(l->tx_data, rec, 500);
    raise(SIGKILL);
}

START_TEST(test_shm_kill9_mid_write)
{
    struct shm_link honest, victim;
    pid_t ph = spawn(child_echo, &honest);
    pid_t pk = spawn(child_killed_mid_write, &victim);
    zmq_msg_t in[SHM_MAX_FRAMES];
    ck_assert_int_eq(shm_link_recv(&victim, in, SHM_MAX_FRAMES, WAIT_MS), -1);
    ck_assert_str_eq(victim.why, "the peer ended (its end of the link closed)");
    ck_assert_int_eq(reap(pk), 128 + SIGKILL);
    /* a send to it fails with the same reason */
    char err[256];
    zmq_msg_t f;
    zmq_msg_init_size(&f, 4);
    ck_assert_int_eq(shm_link_send(&victim, &f, 1, WAIT_MS, err, sizeof err), -1);
    ck_assert_str_eq(err, "shm: the peer ended (its end of the link closed)");
    zmq_msg_close(&f);
    shm_link_close(&victim);
    /* the other peer's link is untouched */
    for (unsigned k = 0; k < 50; k++) round_trip(&honest, 3000 + k, k);
    say_bye(&honest);
    ck_assert_int_eq(reap(ph), 0);
    shm_link_close(&honest);
    ck_assert_int_eq(segments_left(), 0);
}
END_TEST

/* Hostile members, each writing into the shared pages as it pleases. */
static void child_garbage(struct shm_link *l)
{
    for (size_t i = 0; i < 4096; i++) l->tx_data[i] = (unsigned char)(i * 131 + 7);
    atomic_store(&l->tx->head, 4096);
    pause();
}

static void child_head_out_of_bounds(struct shm_link *l)
{
    atomic_store(&l->tx->head, (uint64_t)RING * 3);
    pause();
}

/* announces more frames than a message may have */
static void child_too_many_frames(struct shm_link *l)
{
    uint32_t w[4] = { 0, 0, 4 + 4 * 5000, 5000 };        /* time, length, frame count */
    memcpy(l->tx_data, w, sizeof w);
    atomic_store(&l->tx->head, 16 + 4 * 5000 + 8);
    pause();
}

/* a pad (frame count 0) at the ring's start: it must run to the end from
 * anywhere but the start */
static void child_bad_pad(struct shm_link *l)
{
    uint32_t w[4] = { 0, 0, 100, 0 };                     /* time, length, frame count 0 */
    memcpy(l->tx_data, w, sizeof w);
    atomic_store(&l->tx->head, 128);
    pause();
}

/* moves the other side's read position of its own sending ring */
static void child_tail_out_of_bounds(struct shm_link *l)
{
    atomic_store(&l->rx->tail, (uint64_t)1 << 40);
    send_bytes(l, "x", 1);           /* tells the parent it is done */
    pause();
}

/* a well-framed record whose frames are not a wire message, then an honest one */
static void child_bad_wire(struct shm_link *l)
{
    send_bytes(l, "\xc1\xc1\xc1 not msgpack", 16);
    child_echo(l);
}

struct hostile { child_fn fn; const char *why; };

START_TEST(test_shm_hostile_writer)
{
    static const struct hostile cases[] = {
        { child_garbage, "the peer wrote a bad record: it announces " },
        { child_head_out_of_bounds, "the peer wrote its write position out of bounds (196608 bytes ahead of ours, the ring has 65536)" },
        { child_too_many_frames, "the peer wrote a bad record: a record announces 5000 frames (1..1026)" },
        { child_bad_pad, "the peer wrote a bad record: a pad of 100 bytes at offset 0 (the ring's end is 65536 bytes away, 128 are published)" },
    };
    struct shm_link honest;
    pid_t ph = spawn(child_echo, &honest);
    zmq_msg_t in[SHM_MAX_FRAMES];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct shm_link bad;
        pid_t pb = spawn(cases[c].fn, &bad);
        ck_assert_int_eq(shm_link_recv(&bad, in, SHM_MAX_FRAMES, WAIT_MS), -1);
        ck_assert_msg(strncmp(bad.why, cases[c].why, strlen(cases[c].why)) == 0, "case %zu: %s", c, bad.why);
        kill(pb, SIGKILL);
        reap(pb);
        shm_link_close(&bad);
        round_trip(&honest, 1000, (unsigned)c);
    }
    /* a peer that moves our read position in its half of our ring: our send says so */
    struct shm_link bad;
    pid_t pb = spawn(child_tail_out_of_bounds, &bad);
    int n = shm_link_recv(&bad, in, SHM_MAX_FRAMES, WAIT_MS);
    ck_assert_int_eq(n, 1);
    close_frames(in, n);
    char err[256];
    zmq_msg_t f;
    zmq_msg_init_size(&f, 8);
    ck_assert_int_eq(shm_link_send(&bad, &f, 1, WAIT_MS, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "the peer wrote its read position out of bounds"), "%s", err);
    zmq_msg_close(&f);
    kill(pb, SIGKILL);
    reap(pb);
    shm_link_close(&bad);
    /* frames that are not a wire message: the decoder refuses them, the link goes on */
    pb = spawn(child_bad_wire, &bad);
    n = shm_link_recv(&bad, in, SHM_MAX_FRAMES, WAIT_MS);
    ck_assert_int_eq(n, 1);
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    struct wire_hdr h;
    bool answerable;
    ck_assert_int_eq(wire_decode(in, n, &zone, &h, &answerable, err, sizeof err), -1);
    ck_assert_msg(err[0], "wire_decode gave no reason");
    msgpack_zone_destroy(&zone);
    close_frames(in, n);
    round_trip(&bad, 100, 9);
    say_bye(&bad);
    ck_assert_int_eq(reap(pb), 0);
    shm_link_close(&bad);
    round_trip(&honest, 5000, 11);
    say_bye(&honest);
    ck_assert_int_eq(reap(ph), 0);
    shm_link_close(&honest);
    ck_assert_int_eq(segments_left(), 0);
}
END_TEST

/* An offer whose segment could be shrunk under the taker (SIGBUS), or
 * that is not what it says, is refused before anything is mapped. */
START_TEST(test_shm_hostile_offer)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int fd = memfd_create("trib-shm-unsealed", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096 + 2 * 4096), 0);
    struct { uint64_t magic, cap; uint32_t tag_len; unsigned char tag[SHM_TAG_MAX]; } offer = { 0x31304d5342495254ULL, 4096, 0, { 0 } };
    struct iovec iov = { &offer, sizeof offer };
    union { struct cmsghdr h; char buf[CMSG_SPACE(3 * sizeof(int))]; } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(3 * sizeof(int));
    int fds[3] = { fd, fd, fd };
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    ck_assert_int_eq(sendmsg(sv[0], &mh, 0), (ssize_t)sizeof offer);
    struct shm_link l;
    char err[256];
    ck_assert_int_eq(shm_link_take(sv[1], WAIT_MS, &l, err, sizeof err), -1);
    ck_assert_str_eq(err, "shm: refused a link: the segment is not sealed against resizing");
    /* no descriptor, only bytes */
    ck_assert_int_eq(send(sv[0], &offer, sizeof offer, 0), (ssize_t)sizeof offer);
    ck_assert_int_eq(shm_link_take(sv[1], WAIT_MS, &l, err, sizeof err), -1);
    ck_assert_str_eq(err, "shm: refused a link: the offer carries 0 descriptors, not 3");
    close(fd);
    close(sv[0]);
    close(sv[1]);
    ck_assert_int_eq(segments_left(), 0);
}
END_TEST

static void child_fill_then_echo(struct shm_link *l) { child_echo(l); }

/* A stopped peer: waits end at their timeout with a reason, nothing
 * hangs, and it carries on once continued. */
START_TEST(test_shm_stopped_peer)
{
    struct shm_link l;
    pid_t pid = spawn(child_fill_then_echo, &l);
    round_trip(&l, 10, 1);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    zmq_msg_t in[SHM_MAX_FRAMES];
    ck_assert_int_eq(shm_link_recv(&l, in, SHM_MAX_FRAMES, 200), 0);
    /* fill our ring: the stopped reader takes nothing */
    zmq_msg_t f;
    char err[256];
    int sent = 0;
    for (;;) {
        zmq_msg_init_size(&f, 8000);
        memset(zmq_msg_data(&f), 1, 8000);
        int rc = shm_link_send(&l, &f, 1, 200, err, sizeof err);
        zmq_msg_close(&f);
        if (rc < 0) break;
        sent++;
    }
    ck_assert_msg(strcmp(err, "shm: no room in the ring for 200 ms (the peer does not read)") == 0, "%s", err);
    ck_assert_int_ge(sent, 4);
    ck_assert(!l.dead);
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    for (int i = 0; i < sent; i++) {
        int n = shm_link_recv(&l, in, SHM_MAX_FRAMES, WAIT_MS);
        ck_assert_int_eq(n, 1);
        ck_assert_uint_eq(zmq_msg_size(&in[0]), 8000);
        close_frames(in, n);
    }
    round_trip(&l, 10, 2);
    end_link(&l, pid);
}
END_TEST

KIT_MAIN("rpc",
         { "shm_link", 120, .tests = { test_shm_round_trips,
                                       test_shm_pages_bounded,
                                       test_shm_kill9_mid_write,
                                       test_shm_hostile_writer,
                                       test_shm_hostile_offer,
                                       test_shm_stopped_peer } })
