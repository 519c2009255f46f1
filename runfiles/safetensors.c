/* safetensors writer and validating reader (format in safetensors.h). The
 * header is written by hand so offsets always print as plain integers (a
 * JSON library may print 1e+16, which serde's usize refuses); names are
 * escaped by cJSON, which also parses the header on load. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/check.h"
#include "common/error.h"
#include "common/pread.h"
#include "runfiles/runfile.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian: the host's order");

#define META_KEY "__metadata__"

static const char *const st_dtype[DTYPE_COUNT] = {
    [DTYPE_F32] = "F32", [DTYPE_F64] = "F64", [DTYPE_I32] = "I32", [DTYPE_I64] = "I64", [DTYPE_U8] = "U8",
};

/* s as a JSON string literal, quotes included (cJSON_free it). */
static char *json_quote(const char *s)
{
    cJSON *j = cJSON_CreateString(s);
    CHECK_ALLOC(j);
    char *q = cJSON_PrintUnformatted(j);
    CHECK_ALLOC(q);
    cJSON_Delete(j);
    return q;
}

/* ---- writing ----------------------------------------------------------------- */

static int check_save_args(const struct safetensors_entry *t, int n, const struct safetensors_meta *meta, int n_meta)
{
    if (n < 0 || n_meta < 0) return runfiles_set_error("safetensors_save: negative count");
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name) return runfiles_set_error("safetensors_save: tensor %d has no name", i);
        if (strcmp(t[i].name, META_KEY) == 0)
            return runfiles_set_error("safetensors_save: \"%s\" cannot name a tensor", META_KEY);
        if (!t[i].tensor) return runfiles_set_error("safetensors_save: tensor \"%s\" is NULL", t[i].name);
        if ((unsigned)t[i].tensor->dtype >= DTYPE_COUNT)
            return runfiles_set_error("safetensors_save: tensor \"%s\" has an invalid dtype", t[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return runfiles_set_error("safetensors_save: duplicate tensor name \"%s\"", t[i].name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return runfiles_set_error("safetensors_save: metadata entry %d has a NULL key or value", i);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return runfiles_set_error("safetensors_save: duplicate metadata key \"%s\"", meta[i].key);
    }
    return 0;
}

/* The header JSON, padded with spaces so 8 + *len is a multiple of 8. */
static char *build_header(const struct safetensors_entry *t, int n, const struct safetensors_meta *meta, int n_meta,
                          size_t *len)
{
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    CHECK_ALLOC(f);
    fputc('{', f);
    if (n_meta > 0) {
        fputs("\"" META_KEY "\":{", f);
        for (int i = 0; i < n_meta; i++) {
            char *k = json_quote(meta[i].key), *v = json_quote(meta[i].value);
            fprintf(f, "%s%s:%s", i ? "," : "", k, v);
            cJSON_free(k);
            cJSON_free(v);
        }
        fputc('}', f);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct tensor *x = t[i].tensor;
        char *name = json_quote(t[i].name);
        fprintf(f, "%s%s:{\"dtype\":\"%s\",\"shape\":[", i || n_meta > 0 ? "," : "", name, st_dtype[x->dtype]);
        cJSON_free(name);
        for (int d = 0; d < x->ndim; d++) fprintf(f, "%s%" PRId64, d ? "," : "", x->shape[d]);
        uint64_t nb = tensor_nbytes(x);
        fprintf(f, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    fputc('}', f);
    CHECK(fflush(f) == 0);
    while ((8 + sz) % 8) {
        fputc(' ', f);
        CHECK(fflush(f) == 0);
    }
    CHECK(fclose(f) == 0);
    *len = sz;
    return buf;
}

int safetensors_save(const char *path, const struct safetensors_entry *tensors, int n,
                     const struct safetensors_meta *meta, int n_meta)
{
    if (check_save_args(tensors, n, meta, n_meta) != 0) return -1;
    size_t hlen;
    char *header = build_header(tensors, n, meta, n_meta, &hlen);
    struct atomic_file a;
    if (atomic_file_open(&a, path, "safetensors_save") != 0) {
        free(header);
        return runfiles_set_error("%s", atomic_file_last_error());
    }
    unsigned char len8[8];
    uint64_t hl = hlen;
    memcpy(len8, &hl, 8);
    atomic_file_write(&a, len8, 8);
    atomic_file_write(&a, header, hlen);
    free(header);
    for (int i = 0; i < n; i++) {
        const struct tensor *x = tensors[i].tensor;
        size_t nb = tensor_nbytes(x);
        if (x->device == DEVICE_CPU || nb == 0) {
            atomic_file_write(&a, nb ? tensor_data(x) : NULL, nb);
            continue;
        }
        void *host = trib_xmalloc(nb);
        tensor_copy_to_host(x, host);
        atomic_file_write(&a, host, nb);
        free(host);
    }
    return atomic_file_commit(&a, "safetensors_save") == 0 ? 0 : runfiles_set_error("%s", atomic_file_last_error());
}

/* ---- reading ------------------------------------------------------------------ */

struct entry {
    const char *name;       /* into the parsed JSON */
    enum dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t begin, end;
};

/* A JSON number that is an integer in 0..2^53 (exact in a double). */
static bool json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static int parse_dtype(const cJSON *j, const char *name, char *why, size_t cap, enum dtype *out)
{
    if (!cJSON_IsString(j)) return trib_errf(why, cap, "tensor \"%s\": dtype is missing or not a string", name);
    for (int d = 0; d < DTYPE_COUNT; d++)
        if (strcmp(j->valuestring, st_dtype[d]) == 0) {
            *out = (enum dtype)d;
            return 0;
        }
    snprintf(why, cap, "tensor \"%s\": dtype \"%.32s\" is not one of F32, F64, I32, I64, U8", name, j->valuestring);
    return -1;
}

/* One header entry: dtype, shape and offsets, sizes checked. */
static int parse_entry(const cJSON *j, uint64_t data_len, struct entry *e, char *why, size_t cap)
{
    const char *name = j->string;
    e->name = name;
    if (!cJSON_IsObject(j)) return trib_errf(why, cap, "tensor \"%s\": entry is not an object", name);
    if (parse_dtype(cJSON_GetObjectItemCaseSensitive(j, "dtype"), name, why, cap, &e->dtype) != 0) return -1;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    if (!cJSON_IsArray(shape)) return trib_errf(why, cap, "tensor \"%s\": shape is missing or not an array", name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > TENSOR_MAX_DIMS)
        return trib_errf(why, cap, "tensor \"%s\": shape has %d dims (at most %d)", name, nd, TENSOR_MAX_DIMS);
    e->ndim = nd;
    uint64_t numel = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t v;
        if (!json_uint(x, &v))
            return trib_errf(why, cap, "tensor \"%s\": shape[%d] is not a non-negative integer", name, d);
        e->shape[d] = (int64_t)v;
        if (v && numel > INT64_MAX / 16 / v) overflow = true;   /* tensor_new's own bound */
        numel *= v;
    }
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &e->begin) ||
        !json_uint(offs->child->next, &e->end))
        return trib_errf(why, cap, "tensor \"%s\": data_offsets is not [begin, end] of non-negative integers", name);
    if (e->begin > e->end)
        return trib_errf(why, cap, "tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] end before they begin", name,
                      e->begin, e->end);
    char sh[96];
    shape_str(e->ndim, e->shape, sh, sizeof sh);
    if (overflow) return trib_errf(why, cap, "tensor \"%s\": shape %s is too large", name, sh);
    uint64_t want = numel * dtype_size(e->dtype);
    if (want != e->end - e->begin)
        return trib_errf(why, cap, "tensor \"%s\": shape %s of %s needs %" PRIu64 " bytes but data_offsets span %" PRIu64,
                      name, sh, st_dtype[e->dtype], want, e->end - e->begin);
    if (e->end > data_len)
        return trib_errf(why, cap, "tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] run past the %" PRIu64
                      "-byte data section", name, e->begin, e->end, data_len);
    return 0;
}

static int parse_meta(const cJSON *j, char *why, size_t cap)
{
    if (!cJSON_IsObject(j)) return trib_errf(why, cap, "\"%s\" is not an object", META_KEY);
    for (const cJSON *x = j->child; x; x = x->next)
        if (!cJSON_IsString(x))
            return trib_errf(why, cap, "\"%s\": value of \"%s\" is not a string", META_KEY, x->string);
    return 0;
}

static int by_offset(const void *x, const void *y)
{
    const struct entry *a = x, *b = y;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    return a->end < b->end ? -1 : a->end > b->end;
}

static int by_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* No two keys of the object are equal (cJSON keeps duplicates in order). */
static int check_unique(const cJSON *root, char *why, size_t cap)
{
    int n = cJSON_GetArraySize(root);
    const char **names = trib_xmalloc(sizeof *names * (size_t)(n ? n : 1));
    int k = 0;
    for (const cJSON *x = root->child; x; x = x->next) names[k++] = x->string;
    qsort(names, (size_t)n, sizeof *names, by_name);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0) rc = trib_errf(why, cap, "duplicate name \"%s\"", names[i]);
    free(names);
    return rc;
}

/* The entries sorted by offset tile [0, data_len) exactly. */
static int check_layout(const struct entry *e, int n, uint64_t data_len, char *why, size_t cap)
{
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].begin < at)
            return trib_errf(why, cap, "tensors \"%s\" [%" PRIu64 ",%" PRIu64 ") and \"%s\" [%" PRIu64 ",%" PRIu64
                          ") overlap", e[i - 1].name, e[i - 1].begin, e[i - 1].end, e[i].name, e[i].begin, e[i].end);
        if (e[i].begin > at)
            return trib_errf(why, cap, "%" PRIu64 " unindexed bytes before tensor \"%s\" at offset %" PRIu64,
                          e[i].begin - at, e[i].name, e[i].begin);
        at = e[i].end;
    }
    if (at < data_len) return trib_errf(why, cap, "%" PRIu64 " unindexed bytes after the last tensor", data_len - at);
    return 0;
}

/* An upper bound on the JSON values of a header (what cJSON allocates a
 * node for): one per ',', '[' and '{' outside strings, plus one. Counted
 * over the header's chunks as they are read, before it is parsed, so a
 * header of a million empty tensors costs one pass over its first bytes,
 * not a gigabyte of nodes (nor its whole length in memory). */
struct value_count {
    uint64_t n;                     /* starts at 1 */
    bool in_str, escaped;           /* inside a string; after its '\\' */
};

static void count_values(struct value_count *c, const char *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = h[i];
        if (c->escaped) {
            c->escaped = false;
        } else if (c->in_str) {
            if (ch == '\\') c->escaped = true;
            else if (ch == '"') c->in_str = false;
        } else if (ch == '"') {
            c->in_str = true;
        } else if (ch == ',' || ch == '[' || ch == '{') {
            c->n++;
        }
    }
}

#define HEADER_CHUNK ((size_t)1 << 16)

/* The header's length (the file's first 8 bytes) into *hlen, checked
 * against the file's size and SAFETENSORS_MAX_HEADER. */
static int read_header_len(int fd, uint64_t size, uint64_t *hlen, char *why, size_t cap)
{
    *hlen = 0;
    if (size < 8) return trib_errf(why, cap, "%" PRIu64 " bytes, too short for the 8-byte header length", size);
    if (!pread_full(fd, hlen, 8, 0))
        return trib_errf(why, cap, "read failed: %s", errno ? strerror(errno) : "file shrank");
    if (*hlen > size - 8)
        return trib_errf(why, cap, "header length %" PRIu64 " exceeds the %" PRIu64 " bytes after the length field",
                      *hlen, size - 8);
    if (*hlen > SAFETENSORS_MAX_HEADER)
        return trib_errf(why, cap, "header length %" PRIu64 " exceeds the %d-byte limit", *hlen, SAFETENSORS_MAX_HEADER);
    return 0;
}

/* The hlen bytes of the header, NUL-terminated (free it), read in chunks
 * with their values counted as they come: the buffer grows (doubling) only
 * while the count is within the limit, so a header of too many values
 * costs what was read up to them. NULL with why set. */
static char *read_header(int fd, uint64_t hlen, char *why, size_t cap)
{
    if (hlen == 0) {
        trib_errf(why, cap, "header does not start with '{'");
        return NULL;
    }
    char *h = NULL;
    size_t have = 0, room = 0;
    struct value_count vc = { .n = 1 };
    while (have < hlen) {
        size_t chunk = hlen - have < HEADER_CHUNK ? (size_t)hlen - have : HEADER_CHUNK;
        if (have + chunk + 1 > room) {
            room = room * 2 > have + chunk + 1 ? room * 2 : have + chunk + 1;
            if (room > hlen + 1) room = (size_t)hlen + 1;
            h = trib_xrealloc(h, room);
        }
        if (!pread_full(fd, h + have, chunk, (off_t)(8 + have)))
            trib_errf(why, cap, "read failed: %s", errno ? strerror(errno) : "file shrank");
        else if (have == 0 && h[0] != '{')
            trib_errf(why, cap, "header does not start with '{'");
        else
            count_values(&vc, h + have, chunk);
        have += chunk;
        if (why[0] == '\0' && vc.n > SAFETENSORS_MAX_VALUES)
            trib_errf(why, cap, "header holds more than %d JSON values (at most %d: %d tensors)", SAFETENSORS_MAX_VALUES,
                   SAFETENSORS_MAX_VALUES, SAFETENSORS_MAX_TENSORS);
        if (why[0]) {
            free(h);
            return NULL;
        }
    }
    h[hlen] = '\0';
    return h;
}

/* The header parsed: one JSON object (*root, cJSON_Delete it) followed
 * only by space padding, no duplicate key, at most SAFETENSORS_MAX_TENSORS
 * tensors. */
static int parse_header(const char *h, uint64_t hlen, cJSON **root, char *why, size_t cap)
{
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
    if (!*root || !cJSON_IsObject(*root))
        return trib_errf(why, cap, "header is not valid JSON (error near byte %td of %" PRIu64 ")", end ? end - h : 0,
                      hlen);
    for (const char *p = end; p < h + hlen; p++)
        if (*p != ' ')
            return trib_errf(why, cap, "header has a byte other than space padding after its JSON object (byte %td)",
                          p - h);
    if (check_unique(*root, why, cap) != 0) return -1;
    int tensors = cJSON_GetArraySize(*root) - (cJSON_GetObjectItemCaseSensitive(*root, META_KEY) != NULL);
    if (tensors > SAFETENSORS_MAX_TENSORS)
        return trib_errf(why, cap, "%d tensors (at most %d)", tensors, SAFETENSORS_MAX_TENSORS);
    return 0;
}

/* The header's entries checked, into e (room for every key of root),
 * sorted by offset and tiling the data section; *n of them, and *meta the
 * "__metadata__" object (or NULL). */
static int parse_entries(const cJSON *root, uint64_t data_len, struct entry *e, int *n, const cJSON **meta,
                         char *why, size_t cap)
{
    *n = 0;
    *meta = NULL;
    for (const cJSON *x = root->child; x; x = x->next) {
        if (strcmp(x->string, META_KEY) == 0) {
            if (parse_meta(x, why, cap) != 0) return -1;
            *meta = x;
        } else if (parse_entry(x, data_len, &e[(*n)++], why, cap) != 0) {
            return -1;
        }
    }
    qsort(e, (size_t)*n, sizeof *e, by_offset);
    return check_layout(e, *n, data_len, why, cap);
}

/* A new struct safetensors of the n checked entries, each tensor read from
 * fd (the data section starts at data_off), and the metadata's strings.
 * NULL with why set. */
static struct safetensors *fill_safetensors(int fd, uint64_t data_off, const struct entry *e, int n, const cJSON *meta,
                                            const char *path, char *why, size_t cap)
{
    struct safetensors *st = trib_xcalloc(1, sizeof *st);
    st->path = strdup(path);
    CHECK_ALLOC(st->path);
    st->n = n;
    st->names = trib_xcalloc((size_t)(n ? n : 1), sizeof *st->names);
    st->tensors = trib_xcalloc((size_t)(n ? n : 1), sizeof *st->tensors);
    for (int i = 0; i < n; i++) {
        st->names[i] = strdup(e[i].name);
        CHECK_ALLOC(st->names[i]);
        struct tensor *t = st->tensors[i] = tensor_new(e[i].dtype, DEVICE_CPU, e[i].ndim, e[i].shape);
        if (!t)
            trib_errf(why, cap, "tensor \"%s\": %s", e[i].name, tensor_last_error());
        else if (tensor_nbytes(t) && !pread_full(fd, tensor_data(t), tensor_nbytes(t), (off_t)(data_off + e[i].begin)))
            trib_errf(why, cap, "read failed: %s", errno ? strerror(errno) : "file shrank");
        else
            continue;
        safetensors_free(st);
        return NULL;
    }
    st->n_meta = meta ? cJSON_GetArraySize(meta) : 0;
    st->meta = trib_xcalloc((size_t)(st->n_meta ? st->n_meta : 1), sizeof *st->meta);
    int k = 0;
    for (const cJSON *x = meta ? meta->child : NULL; x; x = x->next, k++) {
        st->meta[k].key = strdup(x->string);
        st->meta[k].value = strdup(x->valuestring);
        CHECK(st->meta[k].key && st->meta[k].value);
    }
    return st;
}

/* Parses and validates the header; fills a new struct safetensors with
 * tensors read from fd. NULL with why set. */
static struct safetensors *load_fd(int fd, uint64_t size, const char *path, char *why, size_t cap)
{
    why[0] = '\0';
    uint64_t hlen;
    if (read_header_len(fd, size, &hlen, why, cap) != 0) return NULL;
    char *h = read_header(fd, hlen, why, cap);
    if (!h) return NULL;
    cJSON *root = NULL;
    struct entry *e = NULL;
    struct safetensors *st = NULL;
    int n = 0;
    const cJSON *meta = NULL;
    if (parse_header(h, hlen, &root, why, cap) == 0) {
        e = trib_xcalloc((size_t)(cJSON_GetArraySize(root) ? cJSON_GetArraySize(root) : 1), sizeof *e);
        if (parse_entries(root, size - 8 - hlen, e, &n, &meta, why, cap) == 0)
            st = fill_safetensors(fd, 8 + hlen, e, n, meta, path, why, cap);
    }
    cJSON_Delete(root);
    free(e);
    free(h);
    return st;
}

struct safetensors *safetensors_load(const char *path)
{
    char why[384];
    /* a FIFO or a device is refused, never waited on */
    int fd = runfile_open_read(path, false, why, sizeof why);
    if (fd < 0) {
        runfiles_set_error("safetensors_load: %s: %s", path, why);
        return NULL;
    }
    struct stat st;
    int bad = fstat(fd, &st) != 0 ? errno : 0;
    struct safetensors *s = NULL;
    if (bad)
        snprintf(why, sizeof why, "%s", strerror(bad));
    else
        s = load_fd(fd, (uint64_t)st.st_size, path, why, sizeof why);
    close(fd);
    if (!s) runfiles_set_error("safetensors_load: %s: %s", path, why);
    return s;
}

struct tensor *safetensors_get(const struct safetensors *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->names[i], name) == 0) return st->tensors[i];
    runfiles_set_error("safetensors: %s: no tensor \"%s\"", st->path, name);
    return NULL;
}

const char *safetensors_meta_get(const struct safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

void safetensors_free(struct safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        free(st->names[i]);
        tensor_free(st->tensors[i]);
    }
    for (int i = 0; st->meta && i < st->n_meta; i++) {
        free((char *)st->meta[i].key);
        free((char *)st->meta[i].value);
    }
    free(st->names);
    free(st->tensors);
    free(st->meta);
    free(st->path);
    free(st);
}
