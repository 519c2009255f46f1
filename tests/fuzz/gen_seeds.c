/* Writes the fuzz targets' seed corpora: valid messages of every type,
 * encoded by the real encoder (rpc_build_msg on the offline agent), and a
 * few malformed ones. Run by hand when the wire format changes:
 *   fuzz_gen_seeds tests/fuzz/corpus/fuzz_wire tests/fuzz/corpus/fuzz_dispatch */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_frames.h"
#include "rpc/rpc_agent.h"

static const char *wire_dir, *dispatch_dir;

/* ---- building messages ------------------------------------------------------ */

/* A message as worker `sender` would send it. */
static struct outmsg *build(int sender, int type, uint64_t req_id, const char *fn, int64_t ac_ctx, int64_t ac_msg,
                            struct rpc_value payload, const char *err)
{
    wire_set_self_id(sender);
    struct outmsg *m = rpc_build_msg(type, req_id, fn, 0, type != WIRE_REQ, ac_ctx, ac_msg, 0,
                                     payload.kind == RPC_NIL ? NULL : &payload, err);
    if (!m) {
        fprintf(stderr, "gen_seeds: %s\n", rpc_last_error());
        exit(1);
    }
    rpc_value_clear(&payload);
    return m;
}

static void free_msg(struct outmsg *m) { rpc_outmsg_free(m); }

/* A growing byte string: a seed being written. */
struct seed { unsigned char *p; size_t n, cap; };

static void put(struct seed *s, const void *p, size_t n)
{
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2;
        s->p = realloc(s->p, s->cap);
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
}

static void put_frame(struct seed *s, const void *p, size_t n)
{
    unsigned char len[2] = { (unsigned char)n, (unsigned char)(n >> 8) };
    if (n > 0xffff) {
        fprintf(stderr, "gen_seeds: frame too long\n");
        exit(1);
    }
    put(s, len, 2);
    put(s, p, n);
}

static void put_msg(struct seed *s, struct outmsg *m)
{
    for (int i = 0; i < m->nframes; i++) put_frame(s, zmq_msg_data(&m->frames[i]), zmq_msg_size(&m->frames[i]));
}

/* For the dispatcher: channel, frame count, frames; frees m. */
static void put_on(struct seed *s, int channel, struct outmsg *m)
{
    unsigned char h[2] = { (unsigned char)channel, (unsigned char)m->nframes };
    put(s, h, 2);
    put_msg(s, m);
    free_msg(m);
}

static void put_raw_on(struct seed *s, int channel, const void *p, size_t n)
{
    unsigned char h[2] = { (unsigned char)channel, 1 };
    put(s, h, 2);
    put_frame(s, p, n);
}

static void save(const char *dir, const char *name, struct seed *s)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s->p, 1, s->n, f) != s->n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(s->p);
    *s = (struct seed){ 0 };
}

/* The nine header fields of a hand-made message (for what the encoder
 * would never write). */
static void raw_hdr(msgpack_packer *pk, int type, uint64_t req_id, int sender, const char *fn, int ntensors)
{
    msgpack_pack_array(pk, 10);
    msgpack_pack_int(pk, WIRE_VERSION);
    msgpack_pack_int(pk, type);
    msgpack_pack_uint64(pk, req_id);
    msgpack_pack_int(pk, sender);
    if (fn) msgpack_pack_str_with_body(pk, fn, strlen(fn)); else msgpack_pack_nil(pk);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, ntensors);
}

/* ---- values ------------------------------------------------------------------ */

static struct rpc_value list_of(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    struct rpc_value l = rpc_list((size_t)n);
    for (int i = 0; i < n; i++) l.list.items[i] = va_arg(ap, struct rpc_value);
    va_end(ap);
    return l;
}

static struct rpc_value a_tensor(enum dtype dt, bool grad)
{
    int64_t shape[2] = { 2, 3 };
    unsigned char data[6 * 8];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 37);
    struct tensor *t = tensor_from_data(dt, 2, shape, data);
    t->requires_grad = grad;
    struct rpc_value v = rpc_tensor(t);
    tensor_free(t);
    return v;
}

static struct rpc_value every_kind(void)
{
    struct rpc_value m = rpc_map(2);
    rpc_map_set(&m, 0, "k", rpc_int(1));
    rpc_map_set(&m, 1, "nested", list_of(2, rpc_list(0), list_of(1, rpc_double(-0.5))));
    return list_of(9, rpc_int(-2), rpc_int(1ll << 40), rpc_double(3.5), rpc_str("s"), rpc_bytes("\0\1\2", 3),
                   rpc_bool(true), rpc_nil(), m, list_of(1, list_of(1, rpc_int(7))));
}

static struct rpc_value dir_entry(int id, bool dynamic)
{
    char name[16], ep[32];
    snprintf(name, sizeof name, "fz%d", id);
    snprintf(ep, sizeof ep, "offline://fz%d", id);
    return list_of(4, rpc_int(id), rpc_str(name), rpc_str(ep), rpc_bool(dynamic));
}

/* ---- the wire decoder's seeds -------------------------------------------------- */

static void wire_seed(const char *name, struct outmsg *m)
{
    struct seed s = { 0 };
    put_msg(&s, m);
    free_msg(m);
    save(wire_dir, name, &s);
}

static void wire_raw(const char *name, const void *p, size_t n)
{
    struct seed s = { 0 };
    put_frame(&s, p, n);
    save(wire_dir, name, &s);
}

static void wire_seeds(void)
{
    wire_seed("req-nil", build(1, WIRE_REQ, 1, "echo", 0, 0, rpc_nil(), NULL));
    wire_seed("req-every-kind", build(1, WIRE_REQ, 2, "echo", 0, 0, every_kind(), NULL));
    wire_seed("req-tensors", build(1, WIRE_REQ, 3, "echo", 5, 6,
                                   list_of(4, a_tensor(DTYPE_F32, true), a_tensor(DTYPE_F64, false),
                                           a_tensor(DTYPE_I64, false), list_of(1, a_tensor(DTYPE_U8, false))), NULL));
    wire_seed("resp-value", build(1, WIRE_RESP, 4, NULL, 0, 0, every_kind(), NULL));
    wire_seed("resp-tensor", build(1, WIRE_RESP, 5, NULL, 5, 7, a_tensor(DTYPE_I32, false), NULL));
    wire_seed("err", build(1, WIRE_ERR, 6, NULL, 0, 0, rpc_nil(), "rpc: w1: echo: failed"));
    wire_seed("ping", build(1, WIRE_PING, 0, NULL, 0, 0, rpc_nil(), NULL));

    msgpack_sbuffer sb;
    msgpack_packer pk;
    /* an RRef descriptor (owner 0, parent 1) */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    raw_hdr(&pk, WIRE_REQ, 7, 1, "echo", 0);
    unsigned char rd[24];
    wire_rref_desc(rd, &(struct wire_rref){ 0, 1, 0x1234, 0x5678 });
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, WIRE_EXT_RREF);
    wire_raw("req-rref", sb.data, sb.size);
    /* malformed: the header cut short */
    wire_raw("bad-truncated", sb.data, sb.size / 2);
    msgpack_sbuffer_destroy(&sb);
    /* a tensor announced and not sent */
    struct outmsg *m = build(1, WIRE_REQ, 8, "echo", 0, 0, list_of(1, a_tensor(DTYPE_F32, false)), NULL);
    wire_raw("bad-missing-frame", zmq_msg_data(&m->frames[0]), zmq_msg_size(&m->frames[0]));
    free_msg(m);
    /* a tensor descriptor with an unknown dtype and a lying size */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    raw_hdr(&pk, WIRE_REQ, 9, 1, "echo", 1);
    unsigned char td[24] = { 99, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 3 };
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, td, sizeof td, WIRE_EXT_TENSOR);
    struct seed s = { 0 };
    put_frame(&s, sb.data, sb.size);
    put_frame(&s, "12345678", 8);
    save(wire_dir, "bad-tensor-desc", &s);
    msgpack_sbuffer_destroy(&sb);
    /* nested deeper than allowed */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    raw_hdr(&pk, WIRE_REQ, 10, 1, "echo", 0);
    for (int i = 0; i < WIRE_MAX_DEPTH + 2; i++) msgpack_pack_array(&pk, 1);
    msgpack_pack_nil(&pk);
    wire_raw("bad-deep", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    /* a string claiming 4 GiB */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    raw_hdr(&pk, WIRE_REQ, 11, 1, "echo", 0);
    msgpack_sbuffer_write(&sb, "\xdb\xff\xff\xff\xff", 5);
    wire_raw("bad-huge-length", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    wire_raw("bad-garbage", "\xc1garbage", 8);
}

/* ---- the dispatcher's seeds ----------------------------------------------------- */

enum { ROLE_RANK1 = 0, ROLE_RANK0 = 1 };
enum { FROM_LOW, FROM_HIGH, STRANGER, DEALER_LOW, DEALER_HIGH };

static void dispatch_save(const char *name, struct seed *s) { save(dispatch_dir, name, s); }

static struct seed role(int r)
{
    struct seed s = { 0 };
    unsigned char b = (unsigned char)r;
    put(&s, &b, 1);
    return s;
}

static void dispatch_seeds(void)
{
    /* as rank 1: worker 0 (the master) and worker 2 are the others */
    struct seed s = role(ROLE_RANK1);
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 1, "echo", 0, 0, every_kind(), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 2, "echo_inline", 0, 0, list_of(1, rpc_int(1)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 3, "defer", 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 4, "fail", 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 5, "call", 0, 0, list_of(1, rpc_int(3)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 6, "nosuch", 0, 0, rpc_nil(), NULL));
    dispatch_save("calls", &s);

    s = role(ROLE_RANK1);
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 0, "__dir", 0, 0,
                               list_of(1, list_of(4, dir_entry(0, false), dir_entry(1, false), dir_entry(2, false),
                                                  dir_entry(3, true))), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 0, "__join", 0, 0, list_of(1, dir_entry(4, true)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 0, "__leave", 0, 0, list_of(1, rpc_int(4)), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 7, "__leave", 0, 0, list_of(1, rpc_int(2)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 8, "__sd_go", 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 9, "__bye", 0, 0, rpc_nil(), NULL));
    dispatch_save("membership", &s);

    s = role(ROLE_RANK0);
    put_on(&s, STRANGER, build(RPC_UNASSIGNED_ID, WIRE_REQ, 1, "__hello", 0, 0,
                               list_of(3, rpc_str("fz9"), rpc_int(RPC_RANK_DYNAMIC), rpc_str("offline://fz9")), NULL));
    put_on(&s, STRANGER, build(3, WIRE_REQ, 2, "echo", 0, 0, list_of(1, rpc_int(1)), NULL));
    put_on(&s, STRANGER, build(3, WIRE_PING, 0, NULL, 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_LOW, build(1, WIRE_REQ, 3, "__sd_ready", 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 4, "__leave", 0, 0, list_of(1, rpc_int(2)), NULL));
    put_on(&s, STRANGER, build(1, WIRE_REQ, 5, "__conn_check", 0, 0, list_of(1, rpc_bytes("\x80xyz", 4)), NULL));
    dispatch_save("rendezvous", &s);

    s = role(ROLE_RANK1);
    put_on(&s, STRANGER, build(0, WIRE_REQ, 1, "echo", 0, 0, list_of(1, rpc_int(1)), NULL));
    put_on(&s, STRANGER, build(0, WIRE_PING, 0, NULL, 0, 0, rpc_nil(), NULL));
    put_on(&s, FROM_LOW, build(2, WIRE_REQ, 2, "__leave", 0, 0, list_of(1, rpc_int(2)), NULL));
    put_on(&s, STRANGER, build(1, WIRE_REQ, 3, "echo", 0, 0, list_of(1, rpc_int(1)), NULL));
    put_raw_on(&s, STRANGER, "\xc1garbage", 8);
    dispatch_save("spoofs", &s);

    uint64_t id = 5, fork = 6;            /* created by worker 0 */
    s = role(ROLE_RANK1);
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 1, "__remote", 0, 0,
                               list_of(4, rpc_int((int64_t)id), rpc_int((int64_t)fork), rpc_str("echo"),
                                       list_of(1, rpc_int(9))), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 2, "__rref_fork", 0, 0,
                                list_of(2, rpc_int((int64_t)id), rpc_int((2ll << 48) | 7)), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 3, "__rref_fork", 0, 0,
                                list_of(2, rpc_int(99), rpc_int((2ll << 48) | 8)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 4, "__rref_fetch", 0, 0, list_of(1, rpc_int((int64_t)id)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 5, "__rref_call", 0, 0,
                               list_of(3, rpc_int((int64_t)id), rpc_str("m"), rpc_list(0)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 6, "__rref_del", 0, 0,
                               list_of(2, rpc_int((int64_t)id), rpc_int((int64_t)fork)), NULL));
    put_on(&s, FROM_HIGH, build(2, WIRE_REQ, 7, "__rref_accept", 0, 0, list_of(1, rpc_int(12)), NULL));
    dispatch_save("rrefs", &s);

    /* an RRef handed on by worker 2, owned by worker 0 (a fork to forward) */
    s = role(ROLE_RANK1);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    raw_hdr(&pk, WIRE_REQ, 1, 2, "echo", 0);
    unsigned char rd[24];
    wire_rref_desc(rd, &(struct wire_rref){ 0, 2, 0x777, (2ull << 48) | 1 });
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, WIRE_EXT_RREF);
    put_raw_on(&s, FROM_HIGH, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    dispatch_save("rref-forwarded", &s);

    int64_t ctx = 11, msg = 12;            /* worker 0's context */
    s = role(ROLE_RANK1);
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 1, "echo", ctx, msg, list_of(1, a_tensor(DTYPE_F32, true)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 2, "dist_autograd._backprop", 0, 0,
                               list_of(3, rpc_int(ctx), rpc_int((1ll << 48) | 1), list_of(1, a_tensor(DTYPE_F32, false))),
                               NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 3, "dist_autograd._release", 0, 0, list_of(1, rpc_int(ctx)), NULL));
    dispatch_save("autograd", &s);

    /* a request with no payload after one with tensors: the receive hook
     * must not see the earlier request's tensors (freed by then) */
    s = role(ROLE_RANK1);
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 1, "echo", ctx, msg, list_of(1, a_tensor(DTYPE_F32, true)), NULL));
    put_on(&s, FROM_LOW, build(0, WIRE_REQ, 2, "echo", ctx, msg + 1, rpc_nil(), NULL));
    dispatch_save("nil-after-tensors", &s);

    s = role(ROLE_RANK1);
    put_on(&s, DEALER_LOW, build(0, WIRE_RESP, 1, NULL, 0, 0, every_kind(), NULL));
    put_on(&s, DEALER_LOW, build(0, WIRE_ERR, 2, NULL, 0, 0, rpc_nil(), "rpc: fz0: echo: failed"));
    put_on(&s, DEALER_HIGH, build(0, WIRE_RESP, 3, NULL, 0, 0, rpc_int(1), NULL));
    put_on(&s, DEALER_HIGH, build(2, WIRE_RESP, 4, NULL, 0, 0, a_tensor(DTYPE_F32, true), NULL));
    put_on(&s, DEALER_LOW, build(0, WIRE_PING, 0, NULL, 0, 0, rpc_nil(), NULL));
    put_on(&s, DEALER_LOW, build(0, WIRE_REQ, 5, "echo", 0, 0, rpc_nil(), NULL));
    put_raw_on(&s, DEALER_LOW, "\x9a\x01\x02\x03", 4);
    dispatch_save("responses", &s);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s WIRE_CORPUS_DIR DISPATCH_CORPUS_DIR\n", argv[0]);
        return 2;
    }
    wire_dir = argv[1];
    dispatch_dir = argv[2];
    if (rpc_offline_init("gen", 0, 3) < 0) return 1;
    wire_seeds();
    dispatch_seeds();
    rpc_offline_fini();
    return 0;
}
