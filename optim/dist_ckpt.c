/* Distributed checkpoints (dist_ckpt.h): the caller plans which worker
 * holds what, every owner writes or reads its own shard through
 * "dist_ckpt._shard", and the caller writes or reads the manifest.
 *
 * Shard format (host byte order), version SHARD_VERSION:
 *   "TRIBSHRD" | u32 version | u32 n_modules | u32 has_optim | u32 0
 *   | i64 the owner's optimizer version
 *   | per module: u32 name length | name | u32 n_params | u64 dropout RNG
 *       | per param: u32 dtype | u32 ndim | i64 shape[4] | u64 nbytes | data
 *   | if has_optim: u64 length | optim_save bytes
 * Its integrity is the manifest's size and hash. The MANIFEST's format and
 * limits: dist_ckpt_internal.h (its parser: dist_ckpt_manifest.c). Where
 * an owner may read and write, and why: dist_ckpt.h "Which directories"
 * (those rules: dist_ckpt_files.c). This file calls into those two; they
 * never call back. */
#define _GNU_SOURCE
#include "optim/dist_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "optim/dist_ckpt_files.h"
#include "optim/dist_ckpt_internal.h"
#include "common/check.h"
#include "common/hash.h"
#include "tensor/backend.h"


#define SHARD_MAGIC "TRIBSHRD"
#define SHARD_VERSION 1
#define MANIFEST DIST_CKPT_MANIFEST
#define MANIFEST_HEADER DIST_CKPT_MANIFEST_HEADER
#define NAME_MAX_LEN DIST_CKPT_NAME_MAX

/* ---- shard encoding ------------------------------------------------------------ */

struct wbuf { uint8_t *p; size_t n, cap; };

static void reserve(struct wbuf *w, size_t n)
{
    if (w->n + n <= w->cap) return;
    while (w->n + n > w->cap) w->cap = w->cap ? 2 * w->cap : 4096;
    w->p = trib_xrealloc(w->p, w->cap);
}

static void put(struct wbuf *w, const void *d, size_t n)
{
    reserve(w, n);
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void put32(struct wbuf *w, uint32_t x) { put(w, &x, 4); }
static void put64(struct wbuf *w, uint64_t x) { put(w, &x, 8); }

struct rbuf { const uint8_t *p, *end; bool bad; };

static const void *take(struct rbuf *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return NULL;
    }
    const void *d = r->p;
    r->p += n;
    return d;
}
static uint32_t get32(struct rbuf *r) { uint32_t x = 0; const void *d = take(r, 4); if (d) memcpy(&x, d, 4); return x; }
static uint64_t get64(struct rbuf *r) { uint64_t x = 0; const void *d = take(r, 8); if (d) memcpy(&x, d, 8); return x; }

static void describe(enum dtype dt, int ndim, const int64_t *shape, char *buf, size_t cap)
{
    char s[96];
    snprintf(buf, cap, "%s %s", dtype_name(dt), shape_str(ndim, shape, s, sizeof s));
}

/* ---- owner side ----------------------------------------------------------------- */

/* One module of a shard request: its name and the module here. */
struct owned_mod { const char *name; struct nn_module *m; };

static int encode_shard(struct rpc_request *req, int n, const struct owned_mod *mods, struct rref *optim,
                        struct wbuf *w)
{
    put(w, SHARD_MAGIC, 8);
    put32(w, SHARD_VERSION);
    put32(w, (uint32_t)n);
    put32(w, optim != NULL);
    put32(w, 0);
    put64(w, (uint64_t)dist_optim_local_version());
    for (int i = 0; i < n; i++) {
        const struct nn_module *m = mods[i].m;
        put32(w, (uint32_t)strlen(mods[i].name));
        put(w, mods[i].name, strlen(mods[i].name));
        put32(w, (uint32_t)m->n_params);
        put64(w, m->rng);
        for (int k = 0; k < m->n_params; k++) {
            struct tensor *s = tensor_snapshot(m->params[k]);
            put32(w, (uint32_t)s->dtype);
            put32(w, (uint32_t)s->ndim);
            for (int d = 0; d < TENSOR_MAX_DIMS; d++) put64(w, (uint64_t)(d < s->ndim ? s->shape[d] : 0));
            size_t nb = tensor_nbytes(s);
            put64(w, nb);
            reserve(w, nb);
            tensor_copy_to_host(s, w->p + w->n);
            w->n += nb;
            tensor_free(s);
        }
    }
    if (optim) {
        uint8_t *b;
        size_t bl;
        if (dist_optim_local_save(optim, &b, &bl) != 0) return rpc_request_fail(req, "optimizer state: %s", rpc_last_error());
        put64(w, bl);
        put(w, b, bl);
        free(b);
    }
    return 0;
}

/* Checks a shard's bytes against the live modules and optimizer; with
 * apply, then loads them (the optimizer state only when optim is given).
 * 0, or -1 after rpc_request_fail. */
static int decode_shard(struct rpc_request *req, const char *file, const uint8_t *buf, size_t len, int n,
                        const struct owned_mod *mods, struct rref *optim, bool apply)
{
    struct rbuf r = { buf, buf + len, false };
    const void *magic = take(&r, 8);
    if (!magic || memcmp(magic, SHARD_MAGIC, 8) != 0) return rpc_request_fail(req, "shard %s: not a shard", file);
    uint32_t version = get32(&r), n_mods = get32(&r), has_optim = get32(&r);
    get32(&r);
    int64_t owner_version = (int64_t)get64(&r);
    if (r.bad || version != SHARD_VERSION) return rpc_request_fail(req, "shard %s: version %u, expected %d", file, version, SHARD_VERSION);
    if (n_mods != (uint32_t)n)
        return rpc_request_fail(req, "shard %s holds %u modules, %d given for this worker", file, n_mods, n);
    if (!has_optim && optim) return rpc_request_fail(req, "shard %s holds no optimizer state", file);
    /* Pass 1 checks everything; pass 2 (apply) writes. */
    for (int pass = 0; pass < (apply ? 2 : 1); pass++) {
        r.p = buf + 8 + 4 * 4 + 8;
        for (uint32_t i = 0; i < n_mods; i++) {
            uint32_t nl = get32(&r);
            const char *name = nl <= NAME_MAX_LEN ? take(&r, nl) : NULL;
            if (!name) return rpc_request_fail(req, "shard %s: truncated or malformed at module %u", file, i);
            const struct owned_mod *om = NULL;
            for (int k = 0; k < n && !om; k++)
                if (strlen(mods[k].name) == nl && memcmp(mods[k].name, name, nl) == 0) om = &mods[k];
            if (!om) return rpc_request_fail(req, "shard %s holds module '%.*s', which was not given", file, (int)nl, name);
            uint32_t np = get32(&r);
            uint64_t rng = get64(&r);
            if (r.bad) return rpc_request_fail(req, "shard %s: truncated at module '%s'", file, om->name);
            if (np != (uint32_t)om->m->n_params)
                return rpc_request_fail(req, "module '%s': %u parameters in the checkpoint, %d here", om->name, np, om->m->n_params);
            for (uint32_t k = 0; k < np; k++) {
                struct tensor *t = om->m->params[k];
                uint32_t dt = get32(&r), nd = get32(&r);
                int64_t shape[TENSOR_MAX_DIMS];
                for (int d = 0; d < TENSOR_MAX_DIMS; d++) shape[d] = (int64_t)get64(&r);
                uint64_t nb = get64(&r);
                const void *data = r.bad ? NULL : take(&r, nb);
                if (!data) return rpc_request_fail(req, "shard %s: truncated at module '%s' parameter %u", file, om->name, k);
                bool same = dt == (uint32_t)t->dtype && nd == (uint32_t)t->ndim && nb == tensor_nbytes(t);
                for (uint32_t d = 0; same && d < nd; d++) same = shape[d] == t->shape[d];
                if (!same) {
                    char a[128], b[128];
                    describe(dt < DTYPE_COUNT ? (enum dtype)dt : DTYPE_COUNT, nd <= TENSOR_MAX_DIMS ? (int)nd : 0, shape, a, sizeof a);
                    describe(t->dtype, t->ndim, t->shape, b, sizeof b);
                    return rpc_request_fail(req, "module '%s' parameter %u: %s in the checkpoint, %s here", om->name, k, a, b);
                }
                if (pass == 1) {
                    struct tensor_write wr;
                    void *dst = tensor_write_begin(t, &wr);
                    if (t->device == DEVICE_CPU) memcpy(dst, data, nb);
                    else tensor_backend_for(t->device)->copy_from_host(dst, data, nb);
                    tensor_write_end(t, &wr);
                }
            }
            if (pass == 1) om->m->rng = rng;
        }
        const uint8_t *state = NULL;
        uint64_t sl = 0;
        if (has_optim) {
            sl = get64(&r);
            state = r.bad ? NULL : take(&r, sl);
            if (!state) return rpc_request_fail(req, "shard %s: truncated in the optimizer state", file);
        }
        if (r.p != r.end) return rpc_request_fail(req, "shard %s: %zu trailing bytes", file, (size_t)(r.end - r.p));
        /* The optimizer first (optim_load changes nothing when it refuses),
         * before any parameter is written. */
        if (pass == 0 && apply && has_optim && optim) {
            if (dist_optim_local_load(optim, state, (size_t)sl) != 0)
                return rpc_request_fail(req, "optimizer state: %s", rpc_last_error());
            dist_optim_set_local_version(owner_version);
        }
    }
    return 0;
}

/* ---- the owner's function ---------------------------------------------------------- */

enum op { OP_SAVE, OP_CHECK, OP_LOAD };
static const struct { const char *name; enum op op; } OPS[] = { { "save", OP_SAVE }, { "check", OP_CHECK }, { "load", OP_LOAD } };

/* dist_ckpt._shard(op, path, size, hash, [[name, module RRef]...], optimizer RRef | nil)
 *   op "save" -> [size, hash]; "check" and "load" -> nil.
 * path is DIR/shard-G-ME.bin: DIR one this owner may use (dist_ckpt.h),
 * ME this worker's name. Everything is checked before the file system is
 * touched, and a refusal names only what the caller sent. */
static int fn_shard(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->kind != RPC_LIST || args->list.len != 6 || args->list.items[0].kind != RPC_STR ||
        args->list.items[1].kind != RPC_STR || args->list.items[2].kind != RPC_INT ||
        args->list.items[3].kind != RPC_INT || args->list.items[4].kind != RPC_LIST ||
        (args->list.items[5].kind != RPC_RREF && args->list.items[5].kind != RPC_NIL))
        return rpc_request_fail(req, "expected (op, path, size, hash, modules, optimizer)");
    const struct rpc_value *opv = &args->list.items[0], *pathv = &args->list.items[1];
    char q[256];
    size_t k = 0, nops = sizeof OPS / sizeof *OPS;
    while (k < nops && !(strlen(OPS[k].name) == opv->str.len && memcmp(OPS[k].name, opv->str.ptr, opv->str.len) == 0)) k++;
    if (k == nops) return rpc_request_fail(req, "unknown operation '%s'", dist_ckpt_printable(opv->str.ptr, opv->str.len, 32, q, sizeof q));
    enum op op = OPS[k].op;
    /* DIR/FILE: FILE this worker's own shard name, DIR clean and allowed */
    const char *path = pathv->str.ptr, *slash = memrchr(path, '/', pathv->str.len);
    const char *me = rpc_self()->name, *file = slash ? slash + 1 : path;
    size_t dir_len = slash ? (size_t)(slash - path) + (slash == path) : 0;
    if (memchr(path, '\0', pathv->str.len) || !dist_ckpt_own_shard_name(file, me))
        return rpc_request_fail(req, "'%s' is not a shard name of %s (shard-<generation>-%s.bin)",
                                dist_ckpt_printable(file, pathv->str.len - (size_t)(file - path), 80, q, sizeof q), me, me);
    char dir[PATH_MAX];
    if (!dist_ckpt_clean_absolute(path, dir_len)) {
        return rpc_request_fail(req, "'%s' is not a clean absolute directory",
                                dist_ckpt_printable(path, dir_len, 120, q, sizeof q));
    }
    memcpy(dir, path, dir_len);
    dir[dir_len] = '\0';
    int64_t want_size = args->list.items[2].i;
    if (op != OP_SAVE && (want_size < 0 || want_size > DIST_CKPT_MAX_SHARD_BYTES))
        return rpc_request_fail(req, "shard %s: size %lld is out of range 0..%lld", file, (long long)want_size,
                                (long long)DIST_CKPT_MAX_SHARD_BYTES);
    if (!dist_ckpt_dir_allowed(dir))
        return rpc_request_fail(req, "%s is not a checkpoint directory of %s (see dist_ckpt_add_root)",
                                dist_ckpt_printable(dir, dir_len, 120, q, sizeof q), me);

    const struct rpc_value *ml = &args->list.items[4];
    struct rref *optim = args->list.items[5].kind == RPC_RREF ? args->list.items[5].rref : NULL;
    if (ml->list.len > DIST_CKPT_MAX_MODULES) return rpc_request_fail(req, "%zu modules, at most %d", ml->list.len, DIST_CKPT_MAX_MODULES);
    int n = (int)ml->list.len;
    struct owned_mod *mods = trib_xcalloc((size_t)n + 1, sizeof *mods);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct rpc_value *e = &ml->list.items[i];
        if (e->kind != RPC_LIST || e->list.len != 2 || e->list.items[0].kind != RPC_STR || e->list.items[1].kind != RPC_RREF) {
            rc = rpc_request_fail(req, "module %d: expected [name, RRef]", i);
            break;
        }
        mods[i].name = e->list.items[0].str.ptr;
        if (!dist_ckpt_good_name(mods[i].name, false) || strlen(mods[i].name) != e->list.items[0].str.len) {
            rc = rpc_request_fail(req, "module %d: not a module name", i);
            break;
        }
        mods[i].m = remote_module_local(e->list.items[1].rref);
        if (!mods[i].m) rc = rpc_request_fail(req, "module '%s': %s", mods[i].name, rpc_last_error());
    }
    int dfd = rc == 0 ? dist_ckpt_open_dir_nofollow(dir) : -1;
    if (rc == 0 && dfd < 0 && errno == ELOOP) rc = rpc_request_fail(req, "%s: a symbolic link on the way (links are not followed)", dir);
    else if (rc == 0 && dfd < 0) rc = rpc_request_fail(req, "%s: %s", dir, strerror(errno));
    if (rc == 0 && op == OP_SAVE) rc = dist_ckpt_newer_than_checkpoint(req, dfd, file);
    if (rc == 0 && op == OP_SAVE) {
        struct wbuf w = { 0 };
        rc = encode_shard(req, n, mods, optim, &w);
        /* atomic_file.h, the one writer of whole files: a new temporary
         * file (O_EXCL: never through a link), renamed over the shard (a
         * link there is replaced, not followed) */
        char path_ok[PATH_MAX + NAME_MAX + 2];
        snprintf(path_ok, sizeof path_ok, "%s%s%s", dir, dir_len > 1 ? "/" : "", file);
        if (rc == 0 && atomic_file_replace(path_ok, w.p, w.n, NULL) != 0) rc = rpc_request_fail(req, "%s", atomic_file_last_error());
        if (rc == 0) {
            *res = rpc_list(2);
            res->list.items[0] = rpc_int((int64_t)w.n);
            res->list.items[1] = rpc_int((int64_t)trib_fnv1a64(w.p, w.n));
        }
        free(w.p);
    } else if (rc == 0) {
        uint8_t *buf = dist_ckpt_read_shard(req, dfd, file, want_size);
        uint64_t want_hash = (uint64_t)args->list.items[3].i, hash = buf ? trib_fnv1a64(buf, (size_t)want_size) : 0;
        if (!buf)
            rc = -1;
        else if (hash != want_hash)
            rc = rpc_request_fail(req, "shard %s does not match the manifest (%lld bytes, hash %016llx; the manifest says "
                                  "%lld bytes, hash %016llx)", file, (long long)want_size, (unsigned long long)hash,
                                  (long long)want_size, (unsigned long long)want_hash);
        else
            rc = decode_shard(req, file, buf, (size_t)want_size, n, mods, optim, op == OP_LOAD);
        free(buf);
    }
    if (dfd >= 0) close(dfd);
    free(mods);
    return rc;
}

int dist_ckpt_init(void)
{
    rpc_register("dist_ckpt._shard", fn_shard, NULL);
    return 0;
}

/* ---- the caller: plan, manifest ------------------------------------------------- */

/* What one worker holds of a checkpoint. */
struct owner {
    int id;
    char name[64];
    struct rpc_value mods;      /* [[name, RRef]...] */
    struct rref *optim;         /* borrowed, or NULL */
    char file[128];
    int64_t size;
    uint64_t hash;
};

struct plan { int n; struct owner *o; };

static struct owner *owner_of(struct plan *p, int id)
{
    for (int i = 0; i < p->n; i++)
        if (p->o[i].id == id) return &p->o[i];
    p->o = trib_xrealloc(p->o, (size_t)(p->n + 1) * sizeof *p->o);
    struct owner *o = memset(&p->o[p->n++], 0, sizeof *p->o);
    o->id = id;
    o->mods = rpc_list(0);
    struct rpc_worker_info info;
    if (rpc_get_worker_info_by_id(id, &info) == 0) snprintf(o->name, sizeof o->name, "%s", info.name);
    return o;
}

static void plan_free(struct plan *p)
{
    for (int i = 0; i < p->n; i++) rpc_value_clear(&p->o[i].mods);
    free(p->o);
}

/* Groups the modules and optimizer owners by worker. 0 or -1 with error. */
static int make_plan(const char *who, int n, const struct dist_ckpt_module *mods, struct dist_optim *opt,
                     struct plan *p)
{
    memset(p, 0, sizeof *p);
    if (n < 0 || n > DIST_CKPT_MAX_MODULES || (n > 0 && !mods))
        return rpc_set_error("%s: %d modules%s (0-%d)", who, n, n > 0 && !mods ? " and mods is NULL" : "", DIST_CKPT_MAX_MODULES);
    if (opt && dist_optim_num_owners(opt) > DIST_CKPT_MAX_SHARDS)
        return rpc_set_error("%s: the optimizer has %d owners, at most %d", who, dist_optim_num_owners(opt), DIST_CKPT_MAX_SHARDS);
    for (int i = 0; i < n; i++) {
        if (!mods[i].name || !dist_ckpt_good_name(mods[i].name, false))
            return rpc_set_error("%s: module %d: a name is 1-%d printable characters without spaces", who, i, NAME_MAX_LEN);
        for (int j = 0; j < i; j++)
            if (strcmp(mods[i].name, mods[j].name) == 0) return rpc_set_error("%s: module '%s' given twice", who, mods[i].name);
        if (!mods[i].module) return rpc_set_error("%s: module '%s' is NULL", who, mods[i].name);
        struct rref *r = remote_module_rref(mods[i].module);
        struct owner *o = owner_of(p, rref_owner(r));
        size_t k = o->mods.list.len;
        o->mods.list.items = trib_xrealloc(o->mods.list.items, (k + 1) * sizeof *o->mods.list.items);
        o->mods.list.len = k + 1;
        struct rpc_value e = rpc_list(2);
        e.list.items[0] = rpc_str(mods[i].name);
        e.list.items[1] = rpc_rref(r);
        o->mods.list.items[k] = e;
    }
    for (int i = 0; opt && i < dist_optim_num_owners(opt); i++) {
        struct rref *r = dist_optim_local_rref(opt, i);
        owner_of(p, rref_owner(r))->optim = r;
    }
    if (p->n > DIST_CKPT_MAX_SHARDS) return rpc_set_error("%s: %d workers hold the checkpoint, at most %d", who, p->n, DIST_CKPT_MAX_SHARDS);
    for (int i = 0; i < p->n; i++) {
        char q[128];
        if (!p->o[i].name[0]) return rpc_set_error("%s: worker %d is gone", who, p->o[i].id);
        if (!dist_ckpt_good_name(p->o[i].name, true))
            return rpc_set_error("%s: worker '%s' cannot be named in a checkpoint (1-%d printable characters without spaces or '/')",
                                 who, dist_ckpt_printable(p->o[i].name, strlen(p->o[i].name), 63, q, sizeof q), NAME_MAX_LEN);
    }
    return 0;
}

/* Runs op on every owner in parallel; 0, or -1 with "who: worker: error". */
static int call_owners(const char *who, struct plan *p, const char *op, const char *dir)
{
    struct rpc_future **fs = trib_xcalloc((size_t)p->n, sizeof *fs);
    for (int i = 0; i < p->n; i++) {
        struct owner *o = &p->o[i];
        char path[PATH_MAX + 512];
        snprintf(path, sizeof path, "%s/%s", dir, o->file);
        struct rpc_value a = rpc_list(6);
        a.list.items[0] = rpc_str(op);
        a.list.items[1] = rpc_str(path);
        a.list.items[2] = rpc_int(o->size);
        a.list.items[3] = rpc_int((int64_t)o->hash);
        a.list.items[4] = rpc_value_copy(&o->mods);
        if (o->optim) a.list.items[5] = rpc_rref(o->optim);
        fs[i] = rpc_async(o->name, "dist_ckpt._shard", &a, 0);
        rpc_value_clear(&a);
    }
    int rc = 0;
    char first[1024] = "";
    for (int i = 0; i < p->n; i++) {
        struct rpc_value res = rpc_nil();
        if (rpc_future_wait(fs[i], &res) != 0) {
            if (rc == 0) {
                /* "rpc: worker1: dist_ckpt._shard: TEXT" -> "who: worker1: TEXT" */
                const char *e = rpc_future_error(fs[i]), *t = strstr(e, "dist_ckpt._shard: ");
                snprintf(first, sizeof first, "%s: %s: %s", who, p->o[i].name, t ? t + strlen("dist_ckpt._shard: ") : e);
            }
            rc = -1;
        } else if (strcmp(op, "save") == 0) {
            bool ok = res.kind == RPC_LIST && res.list.len == 2 && res.list.items[0].kind == RPC_INT &&
                      res.list.items[1].kind == RPC_INT && res.list.items[0].i >= 0 &&
                      res.list.items[0].i <= DIST_CKPT_MAX_SHARD_BYTES;
            if (ok) {
                p->o[i].size = res.list.items[0].i;
                p->o[i].hash = (uint64_t)res.list.items[1].i;
            } else if (rc == 0) {
                snprintf(first, sizeof first, "%s: %s: not a shard's [size, hash] in answer to save", who, p->o[i].name);
                rc = -1;
            }
        }
        rpc_value_clear(&res);
        rpc_future_free(fs[i]);
    }
    free(fs);
    if (rc != 0) rpc_set_error("%s", first);   /* the first failure, not the last wait's */
    return rc;
}

/* Reads and parses DIR/MANIFEST: a regular file (no link, no FIFO) of at
 * most DIST_CKPT_MAX_MANIFEST_BYTES. 0, or -1 with "who: path: why"
 * (*missing: it does not exist). */
static int read_manifest(const char *who, const char *dir, struct dist_ckpt_manifest *m, bool *missing)
{
    char path[PATH_MAX + 512], err[256];
    snprintf(path, sizeof path, "%s/" MANIFEST, dir);
    bool gone = false;
    int rc = dist_ckpt_manifest_at(AT_FDCWD, path, m, &gone, err, sizeof err);
    if (missing) *missing = gone;
    return rc == 0 ? 0 : rpc_set_error("%s: %s: %s", who, path, err);
}

/* Removes shard-G-*.bin of generations other than keep, and what a writer
 * of one left (its temporary file, ".shard-G-*.tmp"). Links are removed,
 * never followed. */
static void remove_old_shards(const char *dir, int64_t keep)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        bool hidden = name[0] == '.';
        size_t n = strlen(name), g0 = hidden + 6, g1 = g0;
        if (strncmp(name + hidden, "shard-", 6) != 0) continue;
        while (name[g1] >= '0' && name[g1] <= '9') g1++;
        int64_t g;
        if (dist_ckpt_parse_int(name + g0, g1 - g0, 1, DIST_CKPT_MAX_GENERATION, &g) != DIST_CKPT_NUM_OK || name[g1] != '-' || g == keep) continue;
        if (n > g1 + 4 && strcmp(name + n - 4, hidden ? ".tmp" : ".bin") == 0) unlinkat(dirfd(d), name, 0);
    }
    closedir(d);
}

int dist_ckpt_save(const char *dir_in, int n, const struct dist_ckpt_module *mods, struct dist_optim *opt, int64_t step)
{
    const char *who = "dist_ckpt_save";
    if (!dir_in) return rpc_set_error("%s: dir is NULL", who);
    if (mkdir(dir_in, 0777) != 0 && errno != EEXIST) return rpc_set_error("%s: %s: %s", who, dir_in, strerror(errno));
    char dir[PATH_MAX];
    if (!realpath(dir_in, dir)) return rpc_set_error("%s: %s: %s", who, dir_in, strerror(errno));
    struct plan p;
    if (make_plan(who, n, mods, opt, &p) != 0) {
        plan_free(&p);
        return -1;
    }
    /* The next generation: 1 in a new directory; a manifest that is there
     * but unreadable or malformed is not guessed past (its shards would go). */
    struct dist_ckpt_manifest *old = trib_xcalloc(1, sizeof *old);
    bool missing = false;
    int64_t gen = 1;
    int rc = read_manifest(who, dir, old, &missing);
    if (rc != 0 && missing) rc = 0;
    else if (rc == 0 && old->generation == DIST_CKPT_MAX_GENERATION)
        rc = rpc_set_error("%s: %s/" MANIFEST ": generation %lld is the last one; save into a new directory", who, dir,
                           (long long)old->generation);
    else if (rc == 0) gen = old->generation + 1;
    free(old);
    for (int i = 0; rc == 0 && i < p.n; i++) dist_ckpt_shard_file_name(gen, p.o[i].name, p.o[i].file, sizeof p.o[i].file);
    if (rc == 0) {
        dist_ckpt_active_add(dir);
        rc = call_owners(who, &p, "save", dir);
        dist_ckpt_active_remove(dir);
    }
    if (rc == 0) {
        struct wbuf w = { 0 };
        char line[512];
        int k = snprintf(line, sizeof line, MANIFEST_HEADER "\ngeneration %lld\nstep %lld\n", (long long)gen, (long long)step);
        put(&w, line, (size_t)k);
        for (int i = 0; i < p.n; i++) {
            k = snprintf(line, sizeof line, "shard %s %s %lld %016llx\n", p.o[i].name, p.o[i].file,
                         (long long)p.o[i].size, (unsigned long long)p.o[i].hash);
            put(&w, line, (size_t)k);
        }
        for (int i = 0; i < n; i++) {
            struct owner *o = owner_of(&p, rref_owner(remote_module_rref(mods[i].module)));
            k = snprintf(line, sizeof line, "module %s %s\n", mods[i].name, o->name);
            put(&w, line, (size_t)k);
        }
        for (int i = 0; opt && i < dist_optim_num_owners(opt); i++) {
            struct owner *o = owner_of(&p, rref_owner(dist_optim_local_rref(opt, i)));
            k = snprintf(line, sizeof line, "optimizer %s\n", o->name);
            put(&w, line, (size_t)k);
        }
        char path[PATH_MAX + 512];
        snprintf(path, sizeof path, "%s/" MANIFEST, dir);
        if (atomic_file_replace(path, w.p, w.n, who) != 0) rc = rpc_set_error("%s", atomic_file_last_error());
        free(w.p);
    }
    if (rc == 0) remove_old_shards(dir, gen);
    plan_free(&p);
    return rc;
}

int dist_ckpt_load(const char *dir_in, int n, const struct dist_ckpt_module *mods, struct dist_optim *opt, int64_t *step)
{
    const char *who = "dist_ckpt_load";
    if (!dir_in) return rpc_set_error("%s: dir is NULL", who);
    char dir[PATH_MAX];
    if (!realpath(dir_in, dir)) return rpc_set_error("%s: %s: %s", who, dir_in, strerror(errno));
    struct dist_ckpt_manifest *m = trib_xcalloc(1, sizeof *m);
    struct plan p = { 0 };
    int rc = read_manifest(who, dir, m, NULL);
    if (rc == 0) rc = make_plan(who, n, mods, opt, &p);
    /* Modules: the same names, on the same workers. */
    for (int i = 0; rc == 0 && i < n; i++) {
        int j = 0;
        while (j < m->n_mods && strcmp(m->mod[j].name, mods[i].name) != 0) j++;
        const char *now = owner_of(&p, rref_owner(remote_module_rref(mods[i].module)))->name;
        if (j == m->n_mods) rc = rpc_set_error("%s: module '%s' is not in the checkpoint", who, mods[i].name);
        else if (strcmp(m->mod[j].worker, now) != 0)
            rc = rpc_set_error("%s: module '%s' was saved on %s, it is now on %s", who, mods[i].name, m->mod[j].worker, now);
    }
    for (int j = 0; rc == 0 && j < m->n_mods; j++) {
        int i = 0;
        while (i < n && strcmp(m->mod[j].name, mods[i].name) != 0) i++;
        if (i == n) rc = rpc_set_error("%s: the checkpoint holds module '%s', which was not given", who, m->mod[j].name);
    }
    /* The optimizer: the same owners, or none asked for. */
    if (rc == 0 && opt) {
        bool same = m->n_optim == dist_optim_num_owners(opt);
        for (int i = 0; same && i < m->n_optim; i++)
            same = strcmp(m->optim[i], owner_of(&p, rref_owner(dist_optim_local_rref(opt, i)))->name) == 0;
        if (!same && m->n_optim == 0) rc = rpc_set_error("%s: the checkpoint holds no optimizer state", who);
        else if (!same) rc = rpc_set_error("%s: the optimizer's owners differ from the checkpoint's", who);
    }
    if (rc == 0 && !opt)   /* shards that hold optimizer state are read without it */
        for (int i = 0; i < p.n; i++) p.o[i].optim = NULL;
    /* Each owner's shard, as the manifest lists it (its name checked by the parser). */
    for (int i = 0; rc == 0 && i < p.n; i++) {
        int j = 0;
        while (j < m->n_shards && strcmp(m->shard[j].worker, p.o[i].name) != 0) j++;
        if (j == m->n_shards) {
            rc = rpc_set_error("%s: the checkpoint has no shard of %s", who, p.o[i].name);
            break;
        }
        snprintf(p.o[i].file, sizeof p.o[i].file, "%s", m->shard[j].file);
        p.o[i].size = m->shard[j].size;
        p.o[i].hash = m->shard[j].hash;
    }
    if (rc == 0) {
        dist_ckpt_active_add(dir);
        rc = call_owners(who, &p, "check", dir);
        if (rc == 0) rc = call_owners(who, &p, "load", dir);
        dist_ckpt_active_remove(dir);
    }
    if (rc == 0 && step) *step = m->step;
    plan_free(&p);
    free(m);
    return rc;
}
