/* libFuzzer target: the wire decoder. The input is one message's frames
 * (fuzz_frames.h): a header, then tensor bodies. It is decoded as the I/O
 * thread decodes what it receives (wire_decode, then the payload with
 * wire_to_value), and every value that decodes must come back unchanged
 * from an encode (wire_pack_value) and a second decode. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_frames.h"
#include "rpc/rpc_agent.h"

#define MAX_FRAMES (2 + WIRE_MAX_TENSORS)

static int obuf_write(void *data, const char *buf, size_t len)
{
    return msgpack_sbuffer_write(data, buf, len);
}

/* v encoded and decoded again must equal v. */
static void round_trip(const struct rpc_value *v)
{
    static struct wire_tensors tl, got;
    tl.n = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, obuf_write);
    if (wire_pack_value(&pk, v, &tl, 1, 0) == 0) {
        zmq_msg_t frames[WIRE_MAX_TENSORS];
        for (int i = 0; i < tl.n; i++) {
            size_t n = tensor_nbytes(tl.t[i]);
            zmq_msg_init_size(&frames[i], n);
            if (n) memcpy(zmq_msg_data(&frames[i]), tensor_data(tl.t[i]), n);
        }
        char err[512];
        size_t payload_off, off = 0;
        msgpack_zone zone;
        msgpack_zone_init(&zone, 2048);
        msgpack_object o;
        struct rpc_value back;
        if (wire_validate(sb.data, sb.size, &payload_off, err, sizeof err) < 0 ||
            msgpack_unpack(sb.data, sb.size, &off, &zone, &o) != MSGPACK_UNPACK_SUCCESS ||
            wire_to_value(&o, frames, tl.n, 1, &back, &got, err, sizeof err) < 0) {
            fprintf(stderr, "fuzz_wire: a decoded value does not decode again: %s\n", err);
            abort();
        }
        if (!rpc_value_equal(v, &back)) {
            fprintf(stderr, "fuzz_wire: a value changed in an encode/decode round trip\n");
            abort();
        }
        rpc_value_clear(&back);
        msgpack_zone_destroy(&zone);
        fuzz_close(frames, tl.n);
    }
    for (int i = 0; i < tl.n; i++) tensor_free(tl.t[i]);
    msgpack_sbuffer_destroy(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static zmq_msg_t frames[MAX_FRAMES];
    static struct wire_tensors got;
    static bool hooks;
    if (!hooks) {               /* RRef descriptors decode as a worker's do */
        rref_install_hooks();
        hooks = true;
    }
    int n = fuzz_frames(&data, &size, -1, frames, MAX_FRAMES);
    if (n == 0) return 0;
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    struct wire_hdr h;
    bool answerable;
    char err[512];
    if (wire_decode(frames, n, &zone, &h, &answerable, err, sizeof err) == 0) {
        struct rpc_value v;
        if (wire_to_value(&h.payload, frames + 1, n - 1, 1, &v, &got, err, sizeof err) == 0) {
            round_trip(&v);
            rpc_value_clear(&v);
        }
    }
    msgpack_zone_destroy(&zone);
    fuzz_close(frames, n);
    return 0;
}
