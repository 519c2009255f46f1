/* The wire format (docs/design.md §4.2, rpc/README.md; layout in wire.h): encoding a
 * message (a msgpack header, the payload, one raw frame per tensor body),
 * and decoding a received one with every count, length, depth, dtype and
 * shape checked against the frames before anything is allocated. RRefs
 * are forked and unforked through the RRef hooks (rref*.c installs them),
 * as distributed autograd's ids are filled in through its hooks. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/check.h"
#include "common/error.h"
#include "rpc/wire.h"

/* Owned here: the autograd hooks the codec calls on every message (set
 * before rpc_init, read-only while it runs), and the worker id stamped as
 * every message's sender (rpc_agent.c sets it: rank, or the id rank 0 assigned). */
static struct rpc_autograd_hooks rpc_hooks;
static atomic_int self_id;
static atomic_uint_fast64_t next_gid = 1;    /* rpc_gen_id's counter */
static atomic_size_t max_frame;              /* rpc_opts.max_frame_bytes (0: no bound; wire_set_max_frame) */

const struct rpc_autograd_hooks *wire_hooks(void) { return &rpc_hooks; }
void rpc_set_autograd_hooks(const struct rpc_autograd_hooks *h) { rpc_hooks = h ? *h : (struct rpc_autograd_hooks){ 0 }; }
int rpc_self_id(void) { return atomic_load(&self_id); }
void wire_set_self_id(int id) { atomic_store(&self_id, id); }
void wire_set_max_frame(size_t bytes) { atomic_store(&max_frame, bytes); }

/* The header's bound (10 small fields and the function's name). */
#define HDR_MAX_BYTES 96

/* Whether a message of this payload, function name and tensors keeps every
 * frame within max_frame; else the error, naming the frame. */
static bool frames_fit(size_t payload, const char *fn, const struct wire_tensors *tl)
{
    size_t cap = atomic_load(&max_frame);
    if (!cap) return true;
    size_t first = payload + HDR_MAX_BYTES + (fn ? strlen(fn) : 0);
    if (first > cap) {
        rpc_set_error("rpc: a message of %zu bytes (its first frame) is over max_frame_bytes %zu: the receiver "
                      "would drop the connection", first, cap);
        return false;
    }
    for (int i = 0; i < tl->n; i++)
        if (tensor_nbytes(tl->t[i]) > cap) {
            rpc_set_error("rpc: tensor %d of a message is %zu bytes, over max_frame_bytes %zu: the receiver would "
                          "drop the connection", i, tensor_nbytes(tl->t[i]), cap);
            return false;
        }
    return true;
}

/* rpc_gen_id's low 48 bits: its counter through a keyed permutation (an
 * 8-round Feistel network on 24-bit halves, each round splitmix64's
 * finaliser of the half and that round's key, the keys drawn from
 * getrandom once per process). Distinct counters give distinct ids, so ids
 * stay unique; without the keys the next id cannot be told from earlier
 * ones. Not what guards anything: the owner, participant and holder checks
 * do; this only keeps ids from being guessed. */
#define GID_ROUNDS 8
static uint64_t gid_keys[GID_ROUNDS];
static pthread_once_t gid_once = PTHREAD_ONCE_INIT;

static void gid_keys_init(void)
{
    unsigned char *p = (unsigned char *)gid_keys;
    size_t got = 0;
    while (got < sizeof gid_keys) {
        ssize_t r = getrandom(p + got, sizeof gid_keys - got, 0);
        CHECK(r > 0 || errno == EINTR);
        if (r > 0) got += (size_t)r;
    }
}

static uint64_t gid_round(uint64_t half, uint64_t key)
{
    uint64_t x = half ^ key;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (x ^ (x >> 31)) & 0xffffffu;
}

static uint64_t gid_permute(uint64_t n)
{
    uint64_t l = (n >> 24) & 0xffffffu, r = n & 0xffffffu;
    for (int i = 0; i < GID_ROUNDS; i++) {
        uint64_t t = l ^ gid_round(r, gid_keys[i]);
        l = r;
        r = t;
    }
    return (l << 24) | r;
}

uint64_t rpc_gen_id(void)
{
    pthread_once(&gid_once, gid_keys_init);
    uint64_t low;
    do low = gid_permute(atomic_fetch_add(&next_gid, 1) & 0xffffffffffffull);
    while (low == 0);           /* 0 means "none" to the users of these ids */
    return ((uint64_t)(rpc_self_id() & 0xffff) << 48) | low;
}

/* ---- messages -------------------------------------------------------------- */

/* An outgoing message: pooled when small (the steady state allocates nothing). */
static struct trib_freelist rpc_outmsg_fl =
    TRIB_FREELIST_INIT(sizeof(struct outmsg) + RPC_OUTMSG_POOLED_FRAMES * sizeof(zmq_msg_t), 0, RPC_FREELIST_MAX);

void rpc_outmsg_drain(void) { trib_fl_drain(&rpc_outmsg_fl); }

struct outmsg *rpc_outmsg_new(int nframes)
{
    struct outmsg *m = nframes <= RPC_OUTMSG_POOLED_FRAMES
        ? trib_fl_get(&rpc_outmsg_fl)
        : trib_xmalloc(sizeof *m + (size_t)nframes * sizeof(zmq_msg_t));
    m->next = NULL;
    m->peer = -1;
    m->rid_len = 0;
    m->fut = NULL;
    m->nframes = nframes;
    return m;
}

void rpc_outmsg_free(struct outmsg *m)
{
    for (int i = 0; i < m->nframes; i++) ZMQ_CHECK(zmq_msg_close(&m->frames[i]));
    if (m->nframes <= RPC_OUTMSG_POOLED_FRAMES) trib_fl_put(&rpc_outmsg_fl, m);
    else free(m);
}


static void free_tensor_hint(void *data, void *hint) { (void)data; tensor_free(hint); }

/* A write target for msgpack that starts on the stack and spills to the
 * heap only for large payloads. */
struct obuf { char *data; size_t size, cap; bool heap; char stack[1024]; };

static void obuf_init(struct obuf *b) { b->data = b->stack; b->size = 0; b->cap = sizeof b->stack; b->heap = false; }
static void obuf_fini(struct obuf *b) { if (b->heap) free(b->data); }

static int obuf_write(void *data, const char *buf, size_t len)
{
    struct obuf *b = data;
    if (b->size + len > b->cap) {
        size_t cap = b->cap * 2;
        while (cap < b->size + len) cap *= 2;
        if (b->heap) {
            b->data = trib_xrealloc(b->data, cap);
        } else {
            char *d = trib_xmalloc(cap);
            memcpy(d, b->data, b->size);
            b->data = d;
            b->heap = true;
        }
        b->cap = cap;
    }
    memcpy(b->data + b->size, buf, len);
    b->size += len;
    return 0;
}

static _Thread_local struct wire_tensors tl_tensors;

/* Builds a message. payload may be NULL (nil); err non-NULL makes an error
 * payload (a string). Returns NULL with error if the payload cannot be
 * encoded. */
struct outmsg *rpc_build_msg(int type, uint64_t req_id, const char *fn, int to, bool is_response,
                                int64_t ac_ctx, int64_t ac_msg, int64_t timeout_ms,
                                const struct rpc_value *payload, const char *err)
{
    struct wire_tensors *tl = &tl_tensors;
    tl->n = 0;
    /* The payload first, so its tensors are known (and the autograd hook
     * has run) before the header is written. */
    struct obuf pb, hb;
    obuf_init(&pb);
    obuf_init(&hb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &pb, obuf_write);
    if (err) {
        msgpack_pack_str_with_body(&pk, err, strlen(err));
    } else if (payload) {
        if (wire_pack_value(&pk, payload, tl, to, 0) < 0) {
            for (int i = 0; i < tl->n; i++) tensor_free(tl->t[i]);
            obuf_fini(&pb);
            return NULL;
        }
    } else {
        msgpack_pack_nil(&pk);
    }
    /* Before the autograd hook records a send that would not happen. */
    if (!frames_fit(pb.size, fn, tl)) {
        for (int i = 0; i < tl->n; i++) tensor_free(tl->t[i]);
        obuf_fini(&pb);
        return NULL;
    }
    /* Every request and answer, tensors or not, so a context propagates;
     * the hook gets the payload's own tensors (they carry the grad_fn). */
    if (rpc_hooks.on_send && type != WIRE_PING && type != WIRE_ERR)
        rpc_hooks.on_send(to, is_response, tl->orig, tl->n, &ac_ctx, &ac_msg, rpc_hooks.user);
    msgpack_packer hp;
    msgpack_packer_init(&hp, &hb, obuf_write);
    msgpack_pack_array(&hp, 10);
    msgpack_pack_int(&hp, WIRE_VERSION);
    msgpack_pack_int(&hp, type);
    msgpack_pack_uint64(&hp, req_id);
    msgpack_pack_int(&hp, rpc_self_id());
    if (fn) msgpack_pack_str_with_body(&hp, fn, strlen(fn)); else msgpack_pack_nil(&hp);
    msgpack_pack_int64(&hp, ac_ctx);
    msgpack_pack_int64(&hp, ac_msg);
    msgpack_pack_int64(&hp, timeout_ms);
    msgpack_pack_int(&hp, tl->n);
    struct outmsg *m = rpc_outmsg_new(1 + tl->n);
    ZMQ_CHECK(zmq_msg_init_size(&m->frames[0], hb.size + pb.size));
    char *d = zmq_msg_data(&m->frames[0]);
    memcpy(d, hb.data, hb.size);
    memcpy(d + hb.size, pb.data, pb.size);
    obuf_fini(&hb);
    obuf_fini(&pb);
    for (int i = 0; i < tl->n; i++) {
        struct tensor *t = tl->t[i];
        size_t n = tensor_nbytes(t);
        if (n <= 256) {
            ZMQ_CHECK(zmq_msg_init_size(&m->frames[1 + i], n));
            if (n) memcpy(zmq_msg_data(&m->frames[1 + i]), tensor_data(t), n);
            tensor_free(t);
        } else {
            ZMQ_CHECK(zmq_msg_init_data(&m->frames[1 + i], tensor_data(t), n, free_tensor_hint, t));
        }
    }
    return m;
}

/* ---- encoding ------------------------------------------------------------ */

static void put_u16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

void wire_rref_desc(unsigned char out[24], const struct wire_rref *d)
{
    put_u16(out, (uint16_t)d->owner);
    put_u16(out + 2, (uint16_t)d->parent);
    put_u32(out + 4, 0);
    put_u64(out + 8, d->id);
    put_u64(out + 16, d->fork);
}

int wire_pack_value(msgpack_packer *pk, const struct rpc_value *v, struct wire_tensors *tl, int to, int depth)
{
    if (depth > WIRE_MAX_DEPTH) return rpc_set_error("rpc: value nested deeper than %d", WIRE_MAX_DEPTH);
    switch (v->kind) {
    case RPC_NIL: msgpack_pack_nil(pk); break;
    case RPC_BOOL: if (v->b) msgpack_pack_true(pk); else msgpack_pack_false(pk); break;
    case RPC_INT: msgpack_pack_int64(pk, v->i); break;
    case RPC_DOUBLE: msgpack_pack_double(pk, v->d); break;
    case RPC_STR: msgpack_pack_str_with_body(pk, v->str.ptr, v->str.len); break;
    case RPC_BYTES: msgpack_pack_bin_with_body(pk, v->str.ptr, v->str.len); break;
    case RPC_TENSOR: {
        struct tensor *t = v->tensor;
        if (tl->n >= WIRE_MAX_TENSORS) return rpc_set_error("rpc: more than %d tensors in one message", WIRE_MAX_TENSORS);
        struct tensor *snap;
        if (t->device != DEVICE_CPU) {
            snap = tensor_clone_to(t, DEVICE_CPU);
            if (!snap) return rpc_set_error("rpc: cannot copy tensor to host: %s", tensor_last_error());
        } else {
            snap = tensor_snapshot(t);
        }
        snap->requires_grad = t->requires_grad;
        unsigned char d[16 + 8 * TENSOR_MAX_DIMS];
        d[0] = (unsigned char)t->dtype;
        d[1] = (unsigned char)t->ndim;
        d[2] = t->requires_grad ? 1 : 0;
        d[3] = 0;
        put_u32(d + 4, (uint32_t)tl->n);
        put_u64(d + 8, tensor_nbytes(t));
        for (int i = 0; i < t->ndim; i++) put_u64(d + 16 + 8 * i, (uint64_t)t->shape[i]);
        size_t n = 16 + 8 * (size_t)t->ndim;
        msgpack_pack_ext_with_body(pk, d, n, WIRE_EXT_TENSOR);
        tl->orig[tl->n] = t;
        tl->t[tl->n++] = snap;
        break;
    }
    case RPC_RREF: {
        if (!rref_hooks()->fork) return rpc_set_error("rpc: cannot send an RRef: no RRef support installed");
        struct wire_rref r;
        rref_hooks()->fork(v->rref, to, &r);
        unsigned char d[24];
        wire_rref_desc(d, &r);
        msgpack_pack_ext_with_body(pk, d, sizeof d, WIRE_EXT_RREF);
        break;
    }
    case RPC_LIST:
        msgpack_pack_array(pk, v->list.len);
        for (size_t i = 0; i < v->list.len; i++)
            if (wire_pack_value(pk, &v->list.items[i], tl, to, depth + 1) < 0) return -1;
        break;
    case RPC_MAP:
        msgpack_pack_map(pk, v->map.len);
        for (size_t i = 0; i < v->map.len; i++) {
            const char *k = v->map.items[i].key ? v->map.items[i].key : "";
            msgpack_pack_str_with_body(pk, k, strlen(k));
            if (wire_pack_value(pk, &v->map.items[i].val, tl, to, depth + 1) < 0) return -1;
        }
        break;
    default: return rpc_set_error("rpc: cannot send a value of kind %d", (int)v->kind);
    }
    return 0;
}

/* ---- validation ---------------------------------------------------------- */

struct cursor { const unsigned char *p, *end; char *err; size_t cap; uint64_t values; };

static int verr(struct cursor *c, const char *msg)
{
    snprintf(c->err, c->cap, "%s", msg);
    return -1;
}

static int need(struct cursor *c, uint64_t n)
{
    return (uint64_t)(c->end - c->p) >= n ? 0 : verr(c, "truncated msgpack");
}

static uint64_t be(const unsigned char *p, int n) { uint64_t v = 0; for (int i = 0; i < n; i++) v = v << 8 | p[i]; return v; }

/* Reads one object; containers check their count against the bytes left
 * (each element needs at least one byte) before recursing. */
static int walk(struct cursor *c, int depth)
{
    if (depth > WIRE_MAX_DEPTH) return verr(c, "msgpack nested too deep");
    if (++c->values > WIRE_MAX_VALUES) {
        snprintf(c->err, c->cap, "more than %d msgpack values in one message", WIRE_MAX_VALUES);
        return -1;
    }
    if (need(c, 1) < 0) return -1;
    unsigned b = *c->p++;
    uint64_t count = 0, skip = 0;
    int mult = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 0;
    if ((b & 0xf0) == 0x80) { count = b & 0x0f; mult = 2; }
    else if ((b & 0xf0) == 0x90) { count = b & 0x0f; mult = 1; }
    else if ((b & 0xe0) == 0xa0) skip = b & 0x1f;
    else switch (b) {
    case 0xcc: case 0xd0: skip = 1; break;
    case 0xcd: case 0xd1: skip = 2; break;
    case 0xce: case 0xd2: case 0xca: skip = 4; break;
    case 0xcf: case 0xd3: case 0xcb: skip = 8; break;
    case 0xc4: case 0xd9: if (need(c, 1)) return -1; skip = be(c->p, 1); c->p += 1; break;
    case 0xc5: case 0xda: if (need(c, 2)) return -1; skip = be(c->p, 2); c->p += 2; break;
    case 0xc6: case 0xdb: if (need(c, 4)) return -1; skip = be(c->p, 4); c->p += 4; break;
    case 0xd4: skip = 2; break;
    case 0xd5: skip = 3; break;
    case 0xd6: skip = 5; break;
    case 0xd7: skip = 9; break;
    case 0xd8: skip = 17; break;
    case 0xc7: if (need(c, 1)) return -1; skip = be(c->p, 1) + 1; c->p += 1; break;
    case 0xc8: if (need(c, 2)) return -1; skip = be(c->p, 2) + 1; c->p += 2; break;
    case 0xc9: if (need(c, 4)) return -1; skip = be(c->p, 4) + 1; c->p += 4; break;
    case 0xdc: if (need(c, 2)) return -1; count = be(c->p, 2); c->p += 2; mult = 1; break;
    case 0xdd: if (need(c, 4)) return -1; count = be(c->p, 4); c->p += 4; mult = 1; break;
    case 0xde: if (need(c, 2)) return -1; count = be(c->p, 2); c->p += 2; mult = 2; break;
    case 0xdf: if (need(c, 4)) return -1; count = be(c->p, 4); c->p += 4; mult = 2; break;
    default: return verr(c, "invalid msgpack type byte");
    }
    if (mult) {
        /* msgpack-c's unpacker holds at most 32 open containers (its
         * MSGPACK_EMBED_STACK_SIZE; the outermost is at depth 0): one deeper
         * would pass here and then fail to unpack, unanswered. */
        if (depth >= WIRE_MAX_DEPTH) return verr(c, "msgpack nested too deep");
        uint64_t elems = count * (uint64_t)mult;
        if (elems > (uint64_t)(c->end - c->p)) return verr(c, "msgpack container count exceeds message size");
        for (uint64_t i = 0; i < elems; i++)
            if (walk(c, depth + 1) < 0) return -1;
        return 0;
    }
    if (need(c, skip) < 0) return -1;
    c->p += skip;
    return 0;
}

int wire_validate(const char *buf, size_t len, size_t *payload_off, char *err, size_t cap)
{
    struct cursor c = { (const unsigned char *)buf, (const unsigned char *)buf + len, err, cap, 0 };
    *payload_off = 0;
    if (len > 0 && (unsigned char)buf[0] == 0x9a) {
        /* The header array: remember where the payload starts so a bad
         * payload can still be answered by request id. */
        c.p++;
        for (int i = 0; i < 9; i++)
            if (walk(&c, 1) < 0) return -1;
        *payload_off = (size_t)(c.p - (const unsigned char *)buf);
        if (walk(&c, 1) < 0) return -1;
    } else if (walk(&c, 0) < 0) {
        return -1;
    }
    if (c.p != c.end) return verr(&c, "trailing bytes after msgpack header");
    return 0;
}

/* ---- decoding ------------------------------------------------------------ */

static bool obj_int(const msgpack_object *o, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > INT64_MAX) return false;
        *out = (int64_t)o->via.u64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) { *out = o->via.i64; return true; }
    return false;
}

int wire_parse_hdr(const msgpack_object *o, struct wire_hdr *h, char *err, size_t cap)
{
    memset(h, 0, sizeof *h);
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 10)
        return trib_errf(err, cap, "header is not a 10-element array");
    const msgpack_object *a = o->via.array.ptr;
    int64_t v;
    /* The request id first, so that later errors can still be answered. */
    if (a[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER) return trib_errf(err, cap, "bad request id");
    h->req_id = a[2].via.u64;
    if (!obj_int(&a[0], &v) || v != WIRE_VERSION) return trib_errf(err, cap, "unsupported wire version");
    if (!obj_int(&a[1], &v) || v < WIRE_REQ || v > WIRE_PING) return trib_errf(err, cap, "bad message type");
    h->type = (int)v;
    if (!obj_int(&a[3], &v) || v < -1 || v > 65535) return trib_errf(err, cap, "bad sender id");
    h->sender = (int)v;
    if (a[4].type == MSGPACK_OBJECT_STR) {
        if (a[4].via.str.size == 0 || a[4].via.str.size > 255) return trib_errf(err, cap, "bad function name");
        h->fn = a[4].via.str.ptr;
        h->fn_len = a[4].via.str.size;
    } else if (a[4].type != MSGPACK_OBJECT_NIL) {
        return trib_errf(err, cap, "bad function name");
    }
    if (!obj_int(&a[5], &h->ac_ctx) || !obj_int(&a[6], &h->ac_msg)) return trib_errf(err, cap, "bad autograd ids");
    if (!obj_int(&a[7], &h->timeout_ms)) return trib_errf(err, cap, "bad timeout");
    if (!obj_int(&a[8], &v) || v < 0 || v > WIRE_MAX_TENSORS) return trib_errf(err, cap, "bad tensor count");
    h->ntensors = (int)v;
    h->payload = a[9];
    return 0;
}

/* Decodes the header of frames[0] (frames[1..n) are tensor bodies) into *h
 * (its payload and strings point into zone, which is cleared first). 0, or -1 with err; then
 * h->req_id is the request id when it could be read (else 0), and
 * *answerable says whether the sender should hear of the error. */
int wire_decode(zmq_msg_t *frames, int n, msgpack_zone *zone, struct wire_hdr *h, bool *answerable, char *err, size_t cap)
{
    msgpack_object root;
    const char *buf = zmq_msg_data(&frames[0]);
    size_t len = zmq_msg_size(&frames[0]);
    msgpack_zone_clear(zone);
    memset(h, 0, sizeof *h);
    *answerable = false;
    size_t payload_off;
    if (wire_validate(buf, len, &payload_off, err, cap) < 0) {
        /* Answer by request id if the fields before the payload are sound:
         * parse them with a nil payload in place of the bad one. */
        char head[512];
        if (payload_off == 0 || payload_off >= sizeof head) return -1;
        memcpy(head, buf, payload_off);
        head[payload_off] = (char)0xc0;
        size_t off = 0;
        char herr[256];
        if (msgpack_unpack(head, payload_off + 1, &off, zone, &root) != MSGPACK_UNPACK_SUCCESS) return -1;
        int prc = wire_parse_hdr(&root, h, herr, sizeof herr);
        *answerable = prc == 0 && h->type == WIRE_REQ;
        return -1;
    }
    size_t off = 0;
    if (msgpack_unpack(buf, len, &off, zone, &root) != MSGPACK_UNPACK_SUCCESS) {
        snprintf(err, cap, "undecodable msgpack");
        return -1;
    }
    if (wire_parse_hdr(&root, h, err, cap) < 0) {
        *answerable = root.type == MSGPACK_OBJECT_ARRAY;
        return -1;
    }
    if (h->ntensors != n - 1) {
        snprintf(err, cap, "header announces %d tensor frames, message has %d", h->ntensors, n - 1);
        *answerable = h->type == WIRE_REQ;
        return -1;
    }
    return 0;
}

static int to_value(const msgpack_object *o, zmq_msg_t *frames, int nframes, int from,
                    bool *used, struct wire_tensors *got, struct rpc_value *out, char *err, size_t cap, int depth)
{
    out->kind = RPC_NIL;
    if (depth > WIRE_MAX_DEPTH) return trib_errf(err, cap, "value nested too deep");
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return 0;
    case MSGPACK_OBJECT_BOOLEAN: *out = rpc_bool(o->via.boolean); return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > INT64_MAX) return trib_errf(err, cap, "integer out of range");
        *out = rpc_int((int64_t)o->via.u64);
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = rpc_int(o->via.i64); return 0;
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: *out = rpc_double(o->via.f64); return 0;
    case MSGPACK_OBJECT_STR:
        out->kind = RPC_STR;
        out->str.ptr = rpc_dup_bytes(o->via.str.ptr, o->via.str.size);
        out->str.len = o->via.str.size;
        return 0;
    case MSGPACK_OBJECT_BIN:
        *out = rpc_bytes(o->via.bin.ptr, o->via.bin.size);
        return 0;
    case MSGPACK_OBJECT_ARRAY: {
        struct rpc_value l = rpc_list(o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (to_value(&o->via.array.ptr[i], frames, nframes, from, used, got, &l.list.items[i], err, cap, depth + 1) < 0) {
                rpc_value_clear(&l);
                return -1;
            }
        *out = l;
        return 0;
    }
    case MSGPACK_OBJECT_MAP: {
        struct rpc_value m = rpc_map(o->via.map.size);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR) { rpc_value_clear(&m); return trib_errf(err, cap, "map key is not a string"); }
            m.map.items[i].key = rpc_dup_bytes(kv->key.via.str.ptr, kv->key.via.str.size);
            if (to_value(&kv->val, frames, nframes, from, used, got, &m.map.items[i].val, err, cap, depth + 1) < 0) {
                rpc_value_clear(&m);
                return -1;
            }
        }
        *out = m;
        return 0;
    }
    case MSGPACK_OBJECT_EXT: {
        const unsigned char *d = (const unsigned char *)o->via.ext.ptr;
        uint32_t n = o->via.ext.size;
        if (o->via.ext.type == WIRE_EXT_TENSOR) {
            if (n < 16) return trib_errf(err, cap, "tensor descriptor too short");
            int dt = d[0], ndim = d[1];
            uint32_t idx = get_u32(d + 4);
            uint64_t nbytes = get_u64(d + 8);
            if (dt >= DTYPE_COUNT) return trib_errf(err, cap, "tensor dtype %d unknown", dt);
            if (ndim > TENSOR_MAX_DIMS) return trib_errf(err, cap, "tensor ndim %d exceeds %d", ndim, TENSOR_MAX_DIMS);
            if (n != 16 + 8 * (uint32_t)ndim) return trib_errf(err, cap, "tensor descriptor size %u does not match ndim %d", n, ndim);
            if (idx >= (uint32_t)nframes) return trib_errf(err, cap, "tensor %u has no body frame (%d frames)", idx, nframes);
            if (used[idx]) return trib_errf(err, cap, "tensor frame %u used twice", idx);
            int64_t shape[TENSOR_MAX_DIMS];
            uint64_t numel = 1;
            for (int i = 0; i < ndim; i++) {
                uint64_t s = get_u64(d + 16 + 8 * i);
                if (s > (1ull << 40)) return trib_errf(err, cap, "tensor dim %d is %llu", i, (unsigned long long)s);
                shape[i] = (int64_t)s;
                if (s && numel > (1ull << 40) / s) return trib_errf(err, cap, "tensor too large");
                numel *= s;
            }
            size_t want = numel * dtype_size((enum dtype)dt);
            size_t have = zmq_msg_size(&frames[idx]);
            if (want != nbytes || want != have) {
                char sb[96];
                return trib_errf(err, cap, "tensor %u shape %s %s needs %zu bytes, descriptor says %llu, frame has %zu",
                            idx, shape_str(ndim, shape, sb, sizeof sb), dtype_name((enum dtype)dt), want,
                            (unsigned long long)nbytes, have);
            }
            struct tensor *t = tensor_from_data((enum dtype)dt, ndim, shape, zmq_msg_data(&frames[idx]));
            if (!t) return trib_errf(err, cap, "tensor: %s", tensor_last_error());
            t->requires_grad = (d[2] & 1) != 0;
            used[idx] = true;
            got->t[got->n++] = t;
            out->kind = RPC_TENSOR;
            out->tensor = t;
            return 0;
        }
        if (o->via.ext.type == WIRE_EXT_RREF) {
            if (n != 24) return trib_errf(err, cap, "RRef descriptor size %u", n);
            if (!rref_hooks()->unfork) return trib_errf(err, cap, "RRef received but no RRef support installed");
            struct wire_rref desc = { get_u16(d), get_u16(d + 2), get_u64(d + 8), get_u64(d + 16) };
            struct rref *r = rref_hooks()->unfork(&desc, from, err, cap);
            if (!r) return -1;
            out->kind = RPC_RREF;
            out->rref = r;
            return 0;
        }
        return trib_errf(err, cap, "unknown ext type %d", o->via.ext.type);
    }
    default: return trib_errf(err, cap, "unsupported msgpack type %d", (int)o->type);
    }
}

int wire_to_value(const msgpack_object *o, zmq_msg_t *frames, int nframes, int from,
                  struct rpc_value *out, struct wire_tensors *got, char *err, size_t cap)
{
    bool used[WIRE_MAX_TENSORS] = { 0 };
    got->n = 0;
    if (to_value(o, frames, nframes, from, used, got, out, err, cap, 0) < 0) return -1;
    for (int i = 0; i < nframes; i++)
        if (!used[i]) {
            rpc_value_clear(out);
            return trib_errf(err, cap, "tensor frame %d has no descriptor", i);
        }
    return 0;
}
