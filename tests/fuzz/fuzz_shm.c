/* libFuzzer target: the shared-memory link's reader (rpc/shm.c,
 * shm_link_recv), fed what a hostile member can write into its half of a
 * link. The input: a little-endian u32 start position (the reader's tail),
 * a u32 published length (head - tail), then the ring's bytes from its
 * first. One link, made once in this process over a socketpair, is rewound
 * for each input. Every message the reader accepts goes on as the I/O
 * thread's would: wire_decode, then the payload with wire_to_value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rpc/rpc_agent.h"
#include "rpc/shm.h"

#define RING 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct shm_link reader, writer;
    static zmq_msg_t frames[SHM_MAX_FRAMES];
    static struct wire_tensors got;
    static bool ready;
    if (!ready) {
        int sv[2];
        char err[256];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
            shm_link_offer(sv[0], RING, NULL, 0, &reader, err, sizeof err) < 0 ||
            shm_link_take(sv[1], 1000, &writer, err, sizeof err) < 0) {
            fprintf(stderr, "fuzz_shm: cannot make a link\n");
            abort();
        }
        rref_install_hooks();
        reader.spin_us = 0;
        ready = true;
    }
    if (size < 8) return 0;
    uint32_t start, len;
    memcpy(&start, data, 4);
    memcpy(&len, data + 4, 4);
    data += 8;
    size -= 8;
    memset(writer.tx_data, 0, RING);
    memcpy(writer.tx_data, data, size < RING ? size : RING);
    reader.dead = false;
    reader.why[0] = 0;
    reader.tail = start;
    atomic_store(&reader.rx->tail, (uint64_t)start);
    atomic_store(&reader.rx->head, (uint64_t)start + len);
    int n = shm_link_recv(&reader, frames, SHM_MAX_FRAMES, 0);
    if (n < 0 && !reader.why[0]) {
        fprintf(stderr, "fuzz_shm: the reader ended a link without a reason\n");
        abort();
    }
    if (n <= 0) return 0;
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    struct wire_hdr h;
    bool answerable;
    char err[512];
    if (wire_decode(frames, n, &zone, &h, &answerable, err, sizeof err) == 0) {
        struct rpc_value v;
        if (wire_to_value(&h.payload, frames + 1, n - 1, 1, &v, &got, err, sizeof err) == 0) rpc_value_clear(&v);
    }
    msgpack_zone_destroy(&zone);
    for (int i = 0; i < n; i++) zmq_msg_close(&frames[i]);
    return 0;
}
