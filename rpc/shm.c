/* The shared-memory link (rpc/shm.h has the layout, the protocol and what
 * a hostile member can and cannot do through it). Owned here: nothing but
 * the links the callers hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/shm.h"

#define SHM_MAGIC 0x31304d5342495254ULL      /* "TRIBSM01" */
#define SHM_DATA_OFF 4096                    /* the rings' data start page-aligned */
#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define SHM_POLL_SLICE_MS 100                /* a sleep rechecks the ring at least this often */
#define SHM_SPIN_US_DEFAULT 50

/* The segment's first bytes: what the offer announced. */
struct shm_seg {
    uint64_t magic, cap;
    struct shm_ring ring[2];        /* [0] the offerer's tx, [1] the taker's tx */
};
_Static_assert(sizeof(struct shm_seg) <= SHM_DATA_OFF, "segment header fits its page");

struct shm_offer { uint64_t magic, cap; uint32_t tag_len; unsigned char tag[SHM_TAG_MAX]; };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t align8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static void put(const struct shm_link *l, uint64_t pos, const void *src, size_t n)
{
    size_t off = (size_t)(pos & (l->cap - 1)), first = n < l->cap - off ? n : l->cap - off;
    memcpy(l->tx_data + off, src, first);
    if (n > first) memcpy(l->tx_data, (const unsigned char *)src + first, n - first);
}

static void get(const struct shm_link *l, uint64_t pos, void *dst, size_t n)
{
    size_t off = (size_t)(pos & (l->cap - 1)), first = n < l->cap - off ? n : l->cap - off;
    memcpy(dst, l->rx_data + off, first);
    if (n > first) memcpy((unsigned char *)dst + first, l->rx_data, n - first);
}

static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void wr32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }

static void link_dead(struct shm_link *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void link_dead(struct shm_link *l, const char *fmt, ...)
{
    if (l->dead) return;
    l->dead = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof l->why, fmt, ap);
    va_end(ap);
}

/* ---- setting up ---------------------------------------------------------------- */

static void link_map(struct shm_link *l, unsigned char *map, size_t len, uint64_t cap, bool offerer, int wake_self,
                     int wake_peer, int sock)
{
    struct shm_seg *seg = (struct shm_seg *)map;
    memset(l, 0, sizeof *l);
    l->map = map;
    l->map_len = len;
    l->cap = cap;
    l->tx = &seg->ring[offerer ? 0 : 1];
    l->rx = &seg->ring[offerer ? 1 : 0];
    l->tx_data = map + SHM_DATA_OFF + (offerer ? 0 : cap);
    l->rx_data = map + SHM_DATA_OFF + (offerer ? cap : 0);
    l->wake_self = wake_self;
    l->wake_peer = wake_peer;
    l->sock = sock;
    const char *s = getenv("TRIB_SHM_SPIN_US");
    l->spin_us = s && *s ? atoi(s) : SHM_SPIN_US_DEFAULT;
    l->reset_at = SHM_RESET_AT;
}

int shm_link_offer(int sock, size_t ring_bytes, const void *tag, size_t tag_len, struct shm_link *l, char *err,
                   size_t cap)
{
    if (tag_len > SHM_TAG_MAX) {
        snprintf(err, cap, "shm: a tag of %zu bytes (at most %d)", tag_len, SHM_TAG_MAX);
        return -1;
    }
    uint64_t rc = SHM_RING_MIN;
    if (ring_bytes == 0) ring_bytes = SHM_RING_DEFAULT;
    while (rc < ring_bytes && rc <= SHM_RING_MAX) rc <<= 1;
    if (rc > SHM_RING_MAX) {
        snprintf(err, cap, "shm: a ring of %zu bytes is over the limit (%zu)", ring_bytes, SHM_RING_MAX);
        return -1;
    }
    size_t len = SHM_DATA_OFF + 2 * rc;
    int fd = memfd_create("trib-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int e0 = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), e1 = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    unsigned char *map = MAP_FAILED;
    const char *what = fd < 0 ? "memfd_create" : e0 < 0 || e1 < 0 ? "eventfd"
                     : ftruncate(fd, (off_t)len) < 0 ? "ftruncate"
                     : fcntl(fd, F_ADD_SEALS, SHM_SEALS) < 0 ? "sealing the segment"
                     : (map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ? "mmap" : NULL;
    if (!what) {
        struct shm_seg *seg = (struct shm_seg *)map;
        seg->magic = SHM_MAGIC;
        seg->cap = rc;
        struct shm_offer offer = { .magic = SHM_MAGIC, .cap = rc, .tag_len = (uint32_t)tag_len };
        if (tag_len) memcpy(offer.tag, tag, tag_len);
        struct iovec iov = { &offer, sizeof offer };
        union { struct cmsghdr h; char buf[CMSG_SPACE(3 * sizeof(int))]; } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(3 * sizeof(int));
        int fds[3] = { fd, e0, e1 };
        memcpy(CMSG_DATA(c), fds, sizeof fds);
        ssize_t r;
        do r = sendmsg(sock, &mh, MSG_NOSIGNAL); while (r < 0 && errno == EINTR);
        if (r != (ssize_t)sizeof offer) what = "sending the segment";
    }
    if (what) {
        snprintf(err, cap, "shm: cannot offer a link: %s: %s", what, strerror(errno));
        if (map != MAP_FAILED) munmap(map, len);
        if (fd >= 0) close(fd);
        if (e0 >= 0) close(e0);
        if (e1 >= 0) close(e1);
        return -1;
    }
    close(fd);                      /* the mapping keeps the segment */
    link_map(l, map, len, rc, true, e0, e1, sock);
    return 0;
}

static bool is_eventfd(int fd)
{
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0) return false;
    target[n] = 0;
    return strcmp(target, "anon_inode:[eventfd]") == 0;
}

int shm_link_take(int sock, int timeout_ms, struct shm_link *l, char *err, size_t cap)
{
    struct pollfd pfd = { .fd = sock, .events = POLLIN };
    int pr;
    do pr = poll(&pfd, 1, timeout_ms); while (pr < 0 && errno == EINTR);
    if (pr <= 0) {
        snprintf(err, cap, "shm: no link offered within %d ms", timeout_ms);
        return -1;
    }
    struct shm_offer offer;
    memset(&offer, 0, sizeof offer);
    struct iovec iov = { &offer, sizeof offer };
    union { struct cmsghdr h; char buf[CMSG_SPACE(8 * sizeof(int))]; } ctl;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
    ssize_t r;
    do r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT); while (r < 0 && errno == EINTR);
    int fds[8], nfds = 0;
    for (struct cmsghdr *c = r >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && nfds < 8; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    const char *bad = NULL;
    char why[160] = "";
    struct stat st;
    int seals = -1;
    size_t len = SHM_DATA_OFF + 2 * (size_t)(offer.cap <= SHM_RING_MAX ? offer.cap : 0);
    if (r < 0) snprintf(why, sizeof why, "reading the offer: %s", strerror(errno)), bad = why;
    else if (r == 0) bad = "the peer closed the socket before offering";
    else if (r != (ssize_t)sizeof offer || offer.magic != SHM_MAGIC || offer.tag_len > SHM_TAG_MAX)
        bad = "the offer is not a link's";
    else if (mh.msg_flags & MSG_CTRUNC) bad = "the offer carries too many descriptors";
    else if (nfds != 3) snprintf(why, sizeof why, "the offer carries %d descriptors, not 3", nfds), bad = why;
    else if (offer.cap < SHM_RING_MIN || offer.cap > SHM_RING_MAX || (offer.cap & (offer.cap - 1)))
        snprintf(why, sizeof why, "a ring of %llu bytes (not a power of two in [%zu, %zu])",
                 (unsigned long long)offer.cap, SHM_RING_MIN, SHM_RING_MAX), bad = why;
    else if (fstat(fds[0], &st) < 0 || !S_ISREG(st.st_mode) || (seals = fcntl(fds[0], F_GET_SEALS)) < 0)
        bad = "the segment is not a memfd";
    else if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        bad = "the segment is not sealed against resizing";
    else if ((size_t)st.st_size != len)
        snprintf(why, sizeof why, "the segment has %lld bytes, the offer says %zu", (long long)st.st_size, len), bad = why;
    else if (!is_eventfd(fds[1]) || !is_eventfd(fds[2])) bad = "its wake-up descriptors are not eventfds";
    unsigned char *map = MAP_FAILED;
    if (!bad) {
        map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
        if (map == MAP_FAILED) snprintf(why, sizeof why, "mmap: %s", strerror(errno)), bad = why;
    }
    if (!bad) {
        struct shm_seg *seg = (struct shm_seg *)map;
        if (seg->magic != SHM_MAGIC || seg->cap != offer.cap) bad = "the segment's header is not the offer's";
    }
    if (bad) {
        snprintf(err, cap, "shm: refused a link: %s", bad);
        if (map != MAP_FAILED) munmap(map, len);
        for (int i = 0; i < nfds; i++) close(fds[i]);
        return -1;
    }
    close(fds[0]);
    link_map(l, map, len, offer.cap, false, fds[2], fds[1], sock);
    l->tag_len = offer.tag_len;
    memcpy(l->tag, offer.tag, offer.tag_len);
    return 0;
}

void shm_link_close(struct shm_link *l)
{
    if (l->map) munmap(l->map, l->map_len);
    if (l->wake_self >= 0) close(l->wake_self);
    if (l->wake_peer >= 0) close(l->wake_peer);
    if (l->sock >= 0) close(l->sock);
    l->map = NULL;
    l->wake_self = l->wake_peer = l->sock = -1;
}

/* ---- waiting ------------------------------------------------------------------- */

static void wake(struct shm_link *l, _Atomic uint32_t *flag)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(flag, memory_order_relaxed) && atomic_exchange(flag, 0)) {
        uint64_t one = 1;
        ssize_t r = write(l->wake_peer, &one, sizeof one);   /* EAGAIN: it is awake already */
        (void)r;
    }
}

/* Whether the peer has ended: its end of the socket closed (or it wrote to
 * a socket that carries nothing after the offer). */
static bool peer_ended(struct shm_link *l)
{
    char c;
    ssize_t r = recv(l->sock, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        link_dead(l, "the peer ended (its end of the link closed)");
        return true;
    }
    if (r > 0) {
        link_dead(l, "the peer wrote on the link's socket, which carries nothing after the offer");
        return true;
    }
    return false;
}

bool shm_link_check_peer(struct shm_link *l) { return l->dead || peer_ended(l); }

/* Waits until ready(l) (1), timeout (0) or the link's end (-1): spins
 * spin_us, then sleeps on the eventfd with *flag set. */
static int wait_until(struct shm_link *l, bool (*ready)(struct shm_link *), _Atomic uint32_t *flag, int timeout_ms)
{
    if (ready(l)) return 1;
    if (l->dead) return -1;
    if (timeout_ms == 0) return 0;
    int64_t start = trib_now_us(), spin_end = start + l->spin_us;
    for (unsigned k = 0;; k++) {
        if (ready(l)) return 1;
        if ((k & 63) == 63 && trib_now_us() >= spin_end) break;
        if ((k & 63) == 63) sched_yield();  /* a busy box: let the peer run */
        else cpu_relax();
    }
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : start + (int64_t)timeout_ms * 1000;
    for (;;) {
        atomic_store(flag, 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (ready(l)) break;
        int64_t now = trib_now_us();
        if (now >= deadline) break;
        int64_t left_ms = (deadline - now + 999) / 1000;
        struct pollfd p[2] = { { .fd = l->wake_self, .events = POLLIN }, { .fd = l->sock, .events = POLLIN } };
        int pr = poll(p, 2, left_ms < SHM_POLL_SLICE_MS ? (int)left_ms : SHM_POLL_SLICE_MS);
        if (pr > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(l->wake_self, &v, sizeof v);
            (void)r;
        }
        if (pr > 0 && p[1].revents && !ready(l) && peer_ended(l)) break;
    }
    atomic_store(flag, 0);
    if (ready(l)) return 1;
    return l->dead ? -1 : 0;
}

/* ---- sending ------------------------------------------------------------------- */

static bool has_room(struct shm_link *l)
{
    if (l->dead) return false;
    uint64_t tail = atomic_load_explicit(&l->tx->tail, memory_order_acquire), used = l->head - tail;
    if (used > l->cap) {
        link_dead(l, "the peer wrote its read position out of bounds (%llu bytes behind ours, the ring has %llu)",
                  (unsigned long long)used, (unsigned long long)l->cap);
        return false;
    }
    return l->cap - used >= l->want;
}

int shm_link_send(struct shm_link *l, zmq_msg_t *frames, int n, int timeout_ms, char *err, size_t cap)
{
    if (n < 1 || n > SHM_MAX_FRAMES) {
        snprintf(err, cap, "shm: a message of %d frames (1..%d)", n, SHM_MAX_FRAMES);
        return -1;
    }
    uint64_t body = 4 + 4 * (uint64_t)n, bytes = 0;
    for (int i = 0; i < n; i++) bytes += zmq_msg_size(&frames[i]);
    body += bytes;
    uint64_t need = align8(12 + body);
    if (need > l->cap || body > UINT32_MAX) {
        snprintf(err, cap, "shm: a message of %llu bytes does not fit the link's ring (%llu bytes)",
                 (unsigned long long)body, (unsigned long long)l->cap);
        return -1;
    }
    l->want = need;
    int w = wait_until(l, has_room, &l->tx->writer_sleeps, timeout_ms);
    if (w <= 0) {
        if (w < 0) snprintf(err, cap, "shm: %s", l->why);
        else snprintf(err, cap, "shm: no room in the ring for %d ms (the peer does not read)", timeout_ms);
        return -1;
    }
    unsigned char hdr[16];
    uint64_t ts = (uint64_t)trib_now_ns();
    for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)(ts >> (8 * i));
    /* The reader has taken everything and we are past reset_at: a pad to
     * the ring's end, the record at its start. Traffic that never fills
     * the ring cycles through its first reset_at bytes (those pages stay
     * hot), not through all of them (each page would be touched, and
     * counted in both processes' RSS, once the ring had gone round). */
    uint64_t off = l->head & (l->cap - 1);
    if (l->reset_at && off >= l->reset_at && off >= need && l->cap - off >= 16 &&
        atomic_load_explicit(&l->tx->tail, memory_order_acquire) == l->head) {
        wr32(hdr + 8, (uint32_t)(l->cap - off));
        wr32(hdr + 12, 0);
        put(l, l->head, hdr, 16);
        l->head += l->cap - off;
    }
    wr32(hdr + 8, (uint32_t)body);
    wr32(hdr + 12, (uint32_t)n);
    uint64_t pos = l->head;
    put(l, pos, hdr, 16);
    pos += 16;
    for (int i = 0; i < n; i++, pos += 4) {
        unsigned char b[4];
        wr32(b, (uint32_t)zmq_msg_size(&frames[i]));
        put(l, pos, b, 4);
    }
    for (int i = 0; i < n; i++) {
        size_t s = zmq_msg_size(&frames[i]);
        put(l, pos, zmq_msg_data(&frames[i]), s);
        pos += s;
    }
    l->head += need;
    atomic_store_explicit(&l->tx->head, l->head, memory_order_release);
    wake(l, &l->tx->reader_sleeps);
    l->msgs_sent++;
    l->bytes_sent += bytes;
    return 0;
}

/* ---- receiving ----------------------------------------------------------------- */

/* The frame table of a record whose body has len bytes: count at tbl[0..4),
 * then count lengths. tbl has avail bytes. Lengths go to lens. */
static int parse_table(const unsigned char *tbl, size_t avail, size_t len, uint32_t *lens, int max, char *err,
                       size_t cap)
{
    if (len < 4 || avail < 4) {
        snprintf(err, cap, "a record of %zu bytes has no frame count", len);
        return -1;
    }
    uint32_t n = rd32(tbl);
    if (n < 1 || n > (uint32_t)max) {
        snprintf(err, cap, "a record announces %u frames (1..%d)", n, max);
        return -1;
    }
    if (4 + 4 * (uint64_t)n > len || 4 + 4 * (uint64_t)n > avail) {
        snprintf(err, cap, "a record of %zu bytes cannot hold the lengths of its %u frames", len, n);
        return -1;
    }
    uint64_t sum = 4 + 4 * (uint64_t)n;
    for (uint32_t i = 0; i < n; i++) sum += lens[i] = rd32(tbl + 4 + 4 * (size_t)i);
    if (sum != len) {
        snprintf(err, cap, "a record of %zu bytes whose frames add up to %llu", len, (unsigned long long)sum);
        return -1;
    }
    return (int)n;
}

int shm_frames_parse(const unsigned char *body, size_t len, zmq_msg_t *frames, int max, char *err, size_t cap)
{
    static _Thread_local uint32_t lens[SHM_MAX_FRAMES];
    if (max > SHM_MAX_FRAMES) max = SHM_MAX_FRAMES;
    int n = parse_table(body, len, len, lens, max, err, cap);
    if (n < 0) return -1;
    size_t off = 4 + 4 * (size_t)n;
    for (int i = 0; i < n; i++) {
        ZMQ_CHECK(zmq_msg_init_size(&frames[i], lens[i]));
        if (lens[i]) memcpy(zmq_msg_data(&frames[i]), body + off, lens[i]);
        off += lens[i];
    }
    return n;
}

static bool has_record(struct shm_link *l)
{
    return atomic_load_explicit(&l->rx->head, memory_order_acquire) != l->tail;
}

bool shm_link_arm(struct shm_link *l)
{
    atomic_store(&l->rx->reader_sleeps, 1);
    atomic_thread_fence(memory_order_seq_cst);
    if (!has_record(l)) return true;
    atomic_store(&l->rx->reader_sleeps, 0);
    return false;
}

int shm_link_wake_fd(const struct shm_link *l) { return l->wake_self; }

int64_t shm_link_next_ts(struct shm_link *l)
{
    uint64_t head = atomic_load_explicit(&l->rx->head, memory_order_acquire), avail = head - l->tail;
    if (avail == 0 || l->dead) return -1;
    if (avail < 16 || avail > l->cap) return 0;     /* shm_link_recv says what is wrong */
    unsigned char b[8];
    get(l, l->tail, b, 8);
    uint64_t ts = 0;
    for (int i = 0; i < 8; i++) ts |= (uint64_t)b[i] << (8 * i);
    return (int64_t)(ts >> 1);
}

/* The published bytes ahead of our tail, checked: 0 and l->dead when the
 * peer's head is out of bounds. */
static uint64_t published(struct shm_link *l)
{
    uint64_t head = atomic_load_explicit(&l->rx->head, memory_order_acquire), avail = head - l->tail;
    if (avail > l->cap || avail < 16 || (avail & 7)) {
        link_dead(l, "the peer wrote its write position out of bounds (%llu bytes ahead of ours, the ring has %llu)",
                  (unsigned long long)avail, (unsigned long long)l->cap);
        return 0;
    }
    return avail;
}

int shm_link_recv(struct shm_link *l, zmq_msg_t *frames, int max, int timeout_ms)
{
    int w = wait_until(l, has_record, &l->rx->reader_sleeps, timeout_ms);
    if (w <= 0) return w;
    uint64_t avail = published(l);
    if (!avail) return -1;
    unsigned char hdr[16];
    get(l, l->tail, hdr, 16);
    if (rd32(hdr + 12) == 0) {
        /* a pad (shm_link_send): exactly to the ring's end, from anywhere
         * but its start (so never two in a row), the record after it */
        uint64_t off = l->tail & (l->cap - 1), len = rd32(hdr + 8);
        if (off == 0 || len != l->cap - off || len >= avail) {
            link_dead(l, "the peer wrote a bad record: a pad of %llu bytes at offset %llu (the ring's end is %llu "
                      "bytes away, %llu are published)", (unsigned long long)len, (unsigned long long)off,
                      (unsigned long long)(l->cap - off), (unsigned long long)avail);
            return -1;
        }
        l->tail += len;
        if (!(avail = published(l))) return -1;
        get(l, l->tail, hdr, 16);
    }
    uint64_t len = rd32(hdr + 8), need = align8(12 + len);
    if (need > avail) {
        link_dead(l, "the peer wrote a bad record: it announces %llu bytes, %llu are published",
                  (unsigned long long)len, (unsigned long long)avail);
        return -1;
    }
    /* the table copied out once, then checked: the peer may rewrite it */
    if (max > SHM_MAX_FRAMES) max = SHM_MAX_FRAMES;
    uint32_t n0 = rd32(hdr + 12);
    size_t tlen = 4 + 4 * (size_t)(n0 >= 1 && n0 <= (uint32_t)max ? n0 : 0);
    if (tlen > len) tlen = 4;
    static _Thread_local unsigned char tbl[4 + 4 * SHM_MAX_FRAMES];
    static _Thread_local uint32_t lens[SHM_MAX_FRAMES];
    memcpy(tbl, hdr + 12, 4);
    if (tlen > 4) get(l, l->tail + 16, tbl + 4, tlen - 4);
    char err[200];
    int n = parse_table(tbl, tlen, (size_t)len, lens, max, err, sizeof err);
    if (n < 0) {
        link_dead(l, "the peer wrote a bad record: %s", err);
        return -1;
    }
    uint64_t pos = l->tail + 12 + tlen, bytes = 0;
    for (int i = 0; i < n; i++) {
        ZMQ_CHECK(zmq_msg_init_size(&frames[i], lens[i]));
        if (lens[i]) get(l, pos, zmq_msg_data(&frames[i]), lens[i]);
        pos += lens[i];
        bytes += lens[i];
    }
    l->tail += need;
    atomic_store_explicit(&l->rx->tail, l->tail, memory_order_release);
    wake(l, &l->rx->writer_sleeps);
    l->msgs_recv++;
    l->bytes_recv += bytes;
    return n;
}
