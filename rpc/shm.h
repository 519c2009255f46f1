/* rpc/ internals, the transport layer (rpc/README.md "Transports", issue
 * 32): a shared-memory link between two processes of one host. File: shm.c.
 * Below it: wire.h (the frames it carries are ZeroMQ frames, decoded by
 * wire_decode as the sockets' are). It calls nothing above it.
 *
 * A link is one memfd segment (no name anywhere: nothing in /dev/shm or
 * the temporary directory; freed by the kernel when the last of its two
 * processes unmaps it, however they end) holding two single-producer
 * single-consumer byte rings, one per direction, and two eventfds, one per
 * side, to wake a sleeping reader or writer. The side that offers it
 * (shm_link_offer) creates all three and passes them over a connected
 * Unix socket with SCM_RIGHTS; the side that takes it (shm_link_take)
 * checks the segment before it maps it. The socket stays open for the
 * link's life: its end is how each side learns that the other ended
 * (kill -9 included). No third process can open or map the segment: it
 * has no name, and its descriptor exists only in the two processes.
 *
 * A message is a record in the ring: u64 send time (CLOCK_MONOTONIC ns,
 * one clock for every process of the host), u32 body length, then the
 * body: u32 frame count, u32 length of each frame, the frames' bytes;
 * records start 8-byte aligned. A record with frame count 0 is a pad: its
 * length runs exactly to the ring's end, where the next record starts (a
 * writer that finds its ring empty past SHM_RESET_AT starts again at the
 * start; the pad and that record are published together, and carry the
 * same send time). The writer publishes its position (head) only
 * after the whole record is in, so a reader never sees half a record
 * from an honest writer. Each side keeps its own positions privately and
 * reads only the other's from the segment, checking it: a member can
 * write anything into the shared pages, and the reader copies a record out
 * before it parses it (shm_frames_parse), then hands the frames to
 * wire_decode like any ZeroMQ message. Anything out of bounds ends the
 * link with a reason naming it (the stream cannot be resynchronised).
 *
 * Wake-ups: a waiting side spins for spin_us (no system call), then says
 * it sleeps in the segment and polls its eventfd and the socket. The other
 * side writes that eventfd only when the flag says so: while both are busy
 * no side makes a system call. The eventfds are wake-up hints only: every
 * wait rechecks the ring and is bounded by its timeout, so a hostile
 * member that writes or drains them delays nothing but its own traffic.
 *
 * One thread per direction at a time (a link's sender and its receiver may
 * be two threads). shm_links.c drives this worker's links from the I/O
 * thread (rpc/README.md "Transports"). */
#ifndef TRIB_RPC_SHM_H
#define TRIB_RPC_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/wire.h"

/* A ring's size (bytes of data per direction) unless the offer says
 * otherwise; the largest one a taker accepts. A message must fit in its
 * ring (record header included). */
#define SHM_RING_DEFAULT ((size_t)8 << 20)
#define SHM_RING_MIN ((size_t)4096)
#define SHM_RING_MAX ((size_t)1 << 30)
#define SHM_MAX_FRAMES (2 + WIRE_MAX_TENSORS)
/* A writer that finds its ring empty past this offset pads to the ring's
 * end and starts again at its start: the pages a link touches (and that
 * count in both processes' RSS) are bounded by this plus the deepest
 * backlog, not by the ring's size (rpc/README.md "Transports"). */
#define SHM_RESET_AT ((uint64_t)64 << 10)
#define SHM_TAG_MAX 32

/* One direction's positions, in the segment (each on its own cache line). */
struct shm_ring {
    _Atomic uint64_t head;          /* bytes the writer has published */
    char pad0[56];
    _Atomic uint64_t tail;          /* bytes the reader has consumed */
    char pad1[56];
    _Atomic uint32_t reader_sleeps; /* the reader polls its eventfd: wake it */
    _Atomic uint32_t writer_sleeps; /* the writer waits for room: wake it */
    char pad2[56];
};

struct shm_link {
    unsigned char *map;
    size_t map_len;
    uint64_t cap;                   /* bytes of data per ring (a power of two) */
    struct shm_ring *tx, *rx;       /* in the segment */
    unsigned char *tx_data, *rx_data;
    uint64_t head, tail;            /* private: our tx head, our rx tail */
    int wake_self, wake_peer;       /* eventfds: ours to sleep on, the peer's to wake */
    int sock;                       /* the Unix socket the link came over (its end: the peer ended) */
    int spin_us;
    uint64_t reset_at;              /* our writes: SHM_RESET_AT (0: never pad; tests) */
    uint64_t want;                  /* the sender: room it waits for */
    bool dead;
    unsigned char tag[SHM_TAG_MAX]; /* what the offer said it is for (shm_link_take) */
    size_t tag_len;
    char why[256];                  /* why the link ended (dead) */
    /* traffic (this side's): whole messages and their frames' bytes */
    uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv;
};

/* Creates a link with rings of ring_bytes (0: SHM_RING_DEFAULT; rounded up
 * to a power of two) and passes it over the connected Unix socket sock,
 * which the link then owns, with tag (at most SHM_TAG_MAX bytes: what the
 * link is for, which the taker reads in l->tag). 0, or -1 with err (sock
 * left open). */
int shm_link_offer(int sock, size_t ring_bytes, const void *tag, size_t tag_len, struct shm_link *l, char *err,
                   size_t cap);
/* Takes the link offered over sock (waiting up to timeout_ms), checking the
 * segment: sealed against shrinking and growing, its size and header as
 * announced. 0, or -1 with err naming what is wrong (sock left open). */
int shm_link_take(int sock, int timeout_ms, struct shm_link *l, char *err, size_t cap);
/* Unmaps the segment and closes the descriptors (the socket too). */
void shm_link_close(struct shm_link *l);

/* Writes one message (frames[0..n), not consumed) into the ring, waiting
 * up to timeout_ms (< 0: no limit) for room. 0, or -1 with err: too big
 * for the ring, timed out, or the link ended (then l->dead and l->why). */
int shm_link_send(struct shm_link *l, zmq_msg_t *frames, int n, int timeout_ms, char *err, size_t cap);
/* Reads one message into frames[0..max) (each initialised here; the caller
 * closes them), waiting up to timeout_ms (< 0: no limit). Returns its
 * frame count, 0 if none came in time (timeout 0: none waiting; no spin),
 * or -1: the link ended (the peer
 * ended, or it wrote a record that is out of bounds), l->why says why. */
int shm_link_recv(struct shm_link *l, zmq_msg_t *frames, int max, int timeout_ms);
/* Whether the link has ended (its peer's end of the socket closed, or an
 * earlier violation): for a poll loop whose poll saw the socket readable. */
bool shm_link_check_peer(struct shm_link *l);
/* For a poll loop: says this side is about to sleep on
 * shm_link_wake_fd; false if a message is already waiting (then do not
 * sleep). */
bool shm_link_arm(struct shm_link *l);
int shm_link_wake_fd(const struct shm_link *l);
/* The send time of the next record (ns, halved so it fits), 0 if the ring
 * is out of bounds (shm_link_recv then says why), -1 if none waits. A
 * reader of several links takes the oldest first: messages caused by one
 * another on different links are read in that order (an RRef's fork
 * registered with its owner before the fetch that needs it). */
int64_t shm_link_next_ts(struct shm_link *l);

/* Parses a record's body (body[0..len), a private copy) into frames
 * (initialised here only on success). The frame count, lengths and their
 * sum must match len exactly and the count be 1..max. Frame count, or -1
 * with err. */
int shm_frames_parse(const unsigned char *body, size_t len, zmq_msg_t *frames, int max, char *err, size_t cap);

#endif
