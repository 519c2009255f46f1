/* The files a training run leaves behind (runfiles/): CRC-32C vectors; safetensors
 * round trips, a byte-exact tiny file and every corruption refused with its
 * message; the policy file byte for byte as the writer has always made it,
 * read back, and its refusals; TensorBoard records walked byte by byte (lengths, both CRCs, the
 * Event encoding) and corruptions detected; metrics CSV/JSONL rows parsed
 * back, resume, a full disk; checkpoints round trip, keep-last-K, fall back
 * past refused files; unwritable directories. Real files in a mkdtemp
 * directory under /tmp, removed after each test. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runfiles/ckpt.h"
#include "runfiles/crc32c.h"
#include "runfiles/metrics.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "runfiles/tfevents.h"
#include "kit.h"

/* ---- scratch directory and file helpers ----------------------------------- */

/* base: one directory per TCase, made and removed by the parent process (an
 * unchecked fixture), so a failing test's files go too; dir: the test's own
 * directory inside it (a checked fixture, in the forked test process). */
static char base[64], dir[96];

static void base_setup(void)
{
    snprintf(base, sizeof base, "/tmp/trib-runfiles-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
}

static void base_teardown(void) { kit_rm_rf(base); }

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s/t-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { kit_rm_rf(dir); }

/* dir/name (tests/kit: 8 rotating buffers). */
static const char *P(const char *name) { return kit_path(dir, name); }

static void write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void flip_byte(const char *path, long off)
{
    size_t n;
    unsigned char *b = (unsigned char *)kit_must_read(path, &n);
    ck_assert_int_lt(off, (long)n);
    b[off] ^= 0x40;
    write_all(path, b, n);
    free(b);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* Names in dir, sorted, joined with spaces. */
static void list_dir(const char *d, char *out, size_t cap)
{
    struct dirent **v;
    int n = scandir(d, &v, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (v[i]->d_name[0] != '.' || (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, "..")))
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? " " : "", v[i]->d_name);
        free(v[i]);
    }
    free(v);
}

#define ASSERT_ERR(fmt, ...)                                                  \
    do {                                                                      \
        char want_[1024];                                                     \
        snprintf(want_, sizeof want_, fmt, __VA_ARGS__);                      \
        ck_assert_str_eq(runfiles_last_error(), want_);                       \
    } while (0)

/* ---- crc32c ---------------------------------------------------------------- */

START_TEST(test_crc32c_vectors)
{
    ck_assert_uint_eq(crc32c("123456789", 9), 0xe3069283u);
    ck_assert_uint_eq(crc32c("", 0), 0);
    unsigned char b[32];
    memset(b, 0, sizeof b);       /* RFC 3720 B.4 */
    ck_assert_uint_eq(crc32c(b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    ck_assert_uint_eq(crc32c(b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    ck_assert_uint_eq(crc32c(b, 32), 0x46dd794eu);
    ck_assert_uint_eq(crc32c_update(crc32c(b, 10), b + 10, 22), 0x46dd794eu);
    ck_assert_uint_eq(tfevents_mask_crc(0), 0xa282ead8u);
    ck_assert_uint_eq(tfevents_mask_crc(0xe3069283u), ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
}
END_TEST

/* ---- safetensors ------------------------------------------------------------ */

static void assert_same_tensor(const struct tensor *a, const struct tensor *b)
{
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) ck_assert_int_eq(a->shape[d], b->shape[d]);
    ck_assert_int_eq(a->device, DEVICE_CPU);
    ck_assert(tensor_nbytes(a) == 0 || memcmp(tensor_data(a), tensor_data(b), tensor_nbytes(a)) == 0);
}

START_TEST(test_st_roundtrip)
{
    float f[6] = { 1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, INFINITY };
    double g[4] = { M_PI, -1e300, 0.1, NAN };
    int32_t i32 = -123456;
    int64_t i64[4] = { INT64_MIN, -1, 0, INT64_MAX };
    uint8_t u8[5] = { 0, 1, 127, 128, 255 };
    struct tensor *t[6] = {
        tensor_from_data(DTYPE_F32, 2, (int64_t[]){ 2, 3 }, f),
        tensor_from_data(DTYPE_F64, 1, (int64_t[]){ 4 }, g),
        tensor_from_data(DTYPE_I32, 0, NULL, &i32),
        tensor_from_data(DTYPE_I64, 4, (int64_t[]){ 1, 2, 1, 2 }, i64),
        tensor_from_data(DTYPE_U8, 1, (int64_t[]){ 5 }, u8),
        tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){ 0, 3 }),
    };
    const char *names[6] = { "policy.w", "value \"head\"\n", "count", "rng/state", "bytes", "empty" };
    struct safetensors_entry e[6];
    for (int i = 0; i < 6; i++) e[i] = (struct safetensors_entry){ names[i], t[i] };
    struct safetensors_meta meta[2] = { { "format", "pt" }, { "run", "cartpole/ü" } };
    ck_assert_int_eq(safetensors_save(P("m.safetensors"), e, 6, meta, 2), 0);

    size_t n;
    unsigned char *raw = (unsigned char *)kit_must_read(P("m.safetensors"), &n);
    uint64_t hlen;
    memcpy(&hlen, raw, 8);
    ck_assert_uint_eq((8 + hlen) % 8, 0);
    ck_assert_uint_eq(n, 8 + hlen + 24 + 32 + 4 + 32 + 5);
    free(raw);

    struct safetensors *st = safetensors_load(P("m.safetensors"));
    ck_assert_msg(st != NULL, "%s", runfiles_last_error());
    ck_assert_int_eq(st->n, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(st->names[i], names[i]);
        assert_same_tensor(st->tensors[i], t[i]);
        ck_assert_ptr_eq(safetensors_get(st, names[i]), st->tensors[i]);
    }
    ck_assert_int_eq(st->n_meta, 2);
    ck_assert_str_eq(safetensors_meta_get(st, "run"), "cartpole/ü");
    ck_assert_ptr_null(safetensors_meta_get(st, "nope"));
    ck_assert_ptr_null(safetensors_get(st, "nope"));
    ASSERT_ERR("safetensors: %s: no tensor \"nope\"", P("m.safetensors"));
    safetensors_free(st);
    for (int i = 0; i < 6; i++) tensor_free(t[i]);

    /* no tensors, no metadata: "{}" and 6 spaces */
    ck_assert_int_eq(safetensors_save(P("e.safetensors"), NULL, 0, NULL, 0), 0);
    raw = (unsigned char *)kit_must_read(P("e.safetensors"), &n);
    ck_assert_int_eq(n, 16);
    ck_assert_int_eq(memcmp(raw, "\x08\0\0\0\0\0\0\0{}      ", 16), 0);
    free(raw);
    st = safetensors_load(P("e.safetensors"));
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->n, 0);
    safetensors_free(st);
}
END_TEST

START_TEST(test_st_known_bytes)
{
    struct tensor *a = tensor_from_f32(1, (int64_t[]){ 2 }, (float[]){ 1.0f, 2.0f });
    struct safetensors_meta meta = { "format", "pt" };
    ck_assert_int_eq(safetensors_save(P("a.safetensors"), &(struct safetensors_entry){ "a", a }, 1, &meta, 1), 0);
    static const char want[] =
        "\x58\0\0\0\0\0\0\0"
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   "
        "\x00\x00\x80\x3f\x00\x00\x00\x40";
    size_t n;
    unsigned char *raw = (unsigned char *)kit_must_read(P("a.safetensors"), &n);
    ck_assert_int_eq(n, sizeof want - 1);
    ck_assert_int_eq(memcmp(raw, want, n), 0);
    free(raw);
    tensor_free(a);
}
END_TEST

/* A file of u64 len(header), header, ndata bytes of data (no padding). */
static const char *raw_st(const char *header, size_t ndata)
{
    const char *path = P("bad.safetensors");
    uint64_t h = strlen(header);
    size_t n = 8 + h + ndata;
    unsigned char *b = calloc(1, n);
    memcpy(b, &h, 8);
    memcpy(b + 8, header, h);
    write_all(path, b, n);
    free(b);
    return path;
}

#define F32_2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"

static void assert_st_refused(const char *path, const char *why)
{
    ck_assert_ptr_null(safetensors_load(path));
    ASSERT_ERR("safetensors_load: %s: %s", path, why);
}

START_TEST(test_st_corruptions)
{
    const char *p = P("bad.safetensors");
    write_all(p, "\x08\0\0", 3);
    assert_st_refused(p, "3 bytes, too short for the 8-byte header length");
    write_all(p, "\xe8\x03\0\0\0\0\0\0{}", 10);
    assert_st_refused(p, "header length 1000 exceeds the 2 bytes after the length field");
    /* a sparse file larger than the header limit */
    uint64_t big = SAFETENSORS_MAX_HEADER + 8;
    write_all(p, &big, 8);
    ck_assert_int_eq(truncate(p, (off_t)(8 + big)), 0);
    assert_st_refused(p, "header length 100000008 exceeds the 100000000-byte limit");

    assert_st_refused(raw_st("[1]     ", 0), "header does not start with '{'");
    assert_st_refused(raw_st("{\"a\":", 0), "header is not valid JSON (error near byte 4 of 5)");
    assert_st_refused(raw_st("{}  x", 0), "header has a byte other than space padding after its JSON object (byte 4)");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
                      "tensor \"a\": dtype \"BF16\" is not one of F32, F64, I32, I64, U8");
    assert_st_refused(raw_st("{\"a\":{\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
                      "tensor \"a\": dtype is missing or not a string");
    assert_st_refused(raw_st("{\"a\":7}", 0), "tensor \"a\": entry is not an object");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                      "tensor \"a\": shape [3] of F32 needs 12 bytes but data_offsets span 8");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,1]}}", 1),
                      "tensor \"a\": shape has 5 dims (at most 4)");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],"
                             "\"data_offsets\":[0,0]}}", 0),
                      "tensor \"a\": shape [4294967296,4294967296,0] is too large");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1),
                      "tensor \"a\": shape[0] is not a non-negative integer");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1),
                      "tensor \"a\": shape[0] is not a non-negative integer");
    assert_st_refused(raw_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1),
                      "tensor \"a\": data_offsets is not [begin, end] of non-negative integers");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8,9]}}", 8),
                      "tensor \"a\": data_offsets is not [begin, end] of non-negative integers");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[8,0]}}", 8), "tensor \"a\": data_offsets [8,0] end before they begin");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8]}}", 4),
                      "tensor \"a\": data_offsets [0,8] run past the 4-byte data section");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8]},\"b\":" F32_2 "[4,12]}}", 12),
                      "tensors \"a\" [0,8) and \"b\" [4,12) overlap");
    assert_st_refused(raw_st("{\"b\":" F32_2 "[4,12]},\"a\":" F32_2 "[0,8]}}", 12),
                      "tensors \"a\" [0,8) and \"b\" [4,12) overlap");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8]},\"b\":" F32_2 "[12,20]}}", 20),
                      "4 unindexed bytes before tensor \"b\" at offset 12");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8]}}", 12), "4 unindexed bytes after the last tensor");
    assert_st_refused(raw_st("{\"a\":" F32_2 "[0,8]},\"a\":" F32_2 "[8,16]}}", 16), "duplicate name \"a\"");
    assert_st_refused(raw_st("{\"__metadata__\":{\"k\":1}}", 0), "\"__metadata__\": value of \"k\" is not a string");
    assert_st_refused(raw_st("{\"__metadata__\":[]}", 0), "\"__metadata__\" is not an object");
    unlink(p);
    assert_st_refused(p, "No such file or directory");

    /* unknown keys inside an entry are ignored, as the reference reader does */
    struct safetensors *st = safetensors_load(raw_st("{\"a\":" F32_2 "[0,8],\"x\":1}}", 8));
    ck_assert_msg(st != NULL, "%s", runfiles_last_error());
    safetensors_free(st);
}
END_TEST

START_TEST(test_st_save_errors)
{
    struct tensor *a = tensor_scalar_f32(1.0f);
    struct safetensors_entry two[2] = { { "a", a }, { "a", a } };
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 2, NULL, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "safetensors_save: duplicate tensor name \"a\"");
    two[1].name = "__metadata__";
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 2, NULL, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "safetensors_save: \"__metadata__\" cannot name a tensor");
    two[1] = (struct safetensors_entry){ "b", NULL };
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 2, NULL, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "safetensors_save: tensor \"b\" is NULL");
    struct safetensors_meta m[2] = { { "k", "1" }, { "k", "2" } };
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 1, m, 2), -1);
    ck_assert_str_eq(runfiles_last_error(), "safetensors_save: duplicate metadata key \"k\"");
    ck_assert_int_eq(safetensors_save(P("nodir/x.safetensors"), two, 1, NULL, 0), -1);
    ASSERT_ERR("safetensors_save: %s: No such file or directory", P("nodir/x.safetensors"));
    ck_assert(!exists(P("x.safetensors")));

    /* a failed save leaves the old file and no temporary behind */
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 1, NULL, 0), 0);
    two[1].tensor = a;
    two[1].name = "a";
    ck_assert_int_eq(safetensors_save(P("x.safetensors"), two, 2, NULL, 0), -1);
    char names[256];
    list_dir(dir, names, sizeof names);
    ck_assert_str_eq(names, "x.safetensors");
    tensor_free(a);
}
END_TEST

START_TEST(test_st_cuda)
{
    if (!tensor_cuda_available()) {
        fprintf(stderr, "test_st_cuda: no CUDA device: the device-copy path is not tested here\n");
        return;
    }
    float v[3] = { 1, 2, 3 };
    struct tensor *h = tensor_from_f32(1, (int64_t[]){ 3 }, v), *d = tensor_clone_to(h, DEVICE_CUDA);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(safetensors_save(P("g.safetensors"), &(struct safetensors_entry){ "g", d }, 1, NULL, 0), 0);
    struct safetensors *st = safetensors_load(P("g.safetensors"));
    ck_assert_ptr_nonnull(st);
    assert_same_tensor(st->tensors[0], h);
    safetensors_free(st);
    tensor_free(d);
    tensor_free(h);
}
END_TEST

/* ---- tfevents ----------------------------------------------------------------- */

static uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

/* Protobuf encoding written out by hand, to check the Event bytes
 * independently of protobuf-c: field numbers of TensorBoard's event.proto
 * (wall_time 1 double, step 2 varint, file_version 3, summary 5) and
 * summary.proto (value 1; tag 1, simple_value 2 float). */
static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static size_t expected_scalar_event(unsigned char *p, double wall, int64_t step, const char *tag, float value)
{
    unsigned char val[128], sum[160];
    size_t tl = strlen(tag), nv = 0, ns = 0, n = 0;
    val[nv++] = 0x0a;
    nv += put_varint(val + nv, tl);
    memcpy(val + nv, tag, tl);
    nv += tl;
    val[nv++] = 0x15;
    memcpy(val + nv, &value, 4);
    nv += 4;
    sum[ns++] = 0x0a;
    ns += put_varint(sum + ns, nv);
    memcpy(sum + ns, val, nv);
    ns += nv;
    p[n++] = 0x09;
    memcpy(p + n, &wall, 8);
    n += 8;
    if (step) {
        p[n++] = 0x10;
        n += put_varint(p + n, (uint64_t)step);
    }
    p[n++] = 0x2a;
    n += put_varint(p + n, ns);
    memcpy(p + n, sum, ns);
    return n + ns;
}

static const char *tags[4] = { "return/mean", "loss", "steps_per_s", "lag" };
static const float vals[4] = { 21.5f, -0.125f, 123456.0f, 0.0f };
static const int64_t steps[4] = { 0, 1000, 2000, 1LL << 40 };

/* Writes the four scalars; returns the event file's path (static). */
static const char *write_events(double *t0, double *t1)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    struct tfevents_writer *w = tfevents_open(P("tb/run"));
    ck_assert_msg(w != NULL, "%s", runfiles_last_error());
    for (int i = 0; i < 4; i++) ck_assert_int_eq(tfevents_add_scalar(w, tags[i], vals[i], steps[i]), 0);
    static char path[256];
    snprintf(path, sizeof path, "%s", tfevents_path(w));
    tfevents_close(w);
    clock_gettime(CLOCK_REALTIME, &ts);
    *t1 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return path;
}

START_TEST(test_tfe_records)
{
    double t0, t1;
    const char *path = write_events(&t0, &t1);
    char host[256], want[512];
    gethostname(host, sizeof host);
    ck_assert_int_eq(strncmp(path, P("tb/run/events.out.tfevents."), strlen(P("tb/run/events.out.tfevents."))), 0);
    long long stamp = atoll(path + strlen(P("tb/run/events.out.tfevents.")));
    ck_assert(stamp >= (long long)t0 && stamp <= (long long)t1);
    snprintf(want, sizeof want, "%s%lld.%s", P("tb/run/events.out.tfevents."), stamp, host);
    ck_assert_str_eq(path, want);

    size_t n, off = 0;
    unsigned char *b = (unsigned char *)kit_must_read(path, &n);
    for (int rec = 0; rec < 5; rec++) {
        ck_assert_uint_ge(n - off, 16);
        uint64_t len;
        uint32_t lcrc, dcrc;
        memcpy(&len, b + off, 8);
        memcpy(&lcrc, b + off + 8, 4);
        ck_assert_uint_eq(lcrc, mask(crc32c(b + off, 8)));
        ck_assert_uint_le(len, n - off - 16);
        const unsigned char *data = b + off + 12;
        memcpy(&dcrc, data + len, 4);
        ck_assert_uint_eq(dcrc, mask(crc32c(data, len)));
        ck_assert_uint_eq(data[0], 0x09);
        double wall;
        memcpy(&wall, data + 1, 8);
        ck_assert(wall >= t0 - 1e-3 && wall <= t1 + 1e-3);
        unsigned char exp[256];
        size_t en;
        if (rec == 0) {
            en = 9;
            memcpy(exp, data, 9);
            exp[en++] = 0x1a;
            exp[en++] = 13;
            memcpy(exp + en, "brain.Event:2", 13);
            en += 13;
        } else {
            en = expected_scalar_event(exp, wall, steps[rec - 1], tags[rec - 1], vals[rec - 1]);
        }
        ck_assert_uint_eq(len, en);
        ck_assert_int_eq(memcmp(data, exp, en), 0);
        off += 16 + len;
    }
    ck_assert_uint_eq(off, n);
    free(b);

    struct tfevents_scalar *v;
    int nv;
    ck_assert_msg(tfevents_read_scalars(path, &v, &nv) == 0, "%s", runfiles_last_error());
    ck_assert_int_eq(nv, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(v[i].tag, tags[i]);
        ck_assert(v[i].value == vals[i]);
        ck_assert_int_eq(v[i].step, steps[i]);
        ck_assert(v[i].wall_time >= t0 - 1e-3 && v[i].wall_time <= t1 + 1e-3);
        ck_assert(i == 0 || v[i].wall_time >= v[i - 1].wall_time);
    }
    tfevents_scalars_free(v, nv);
}
END_TEST

/* The byte offset of record k (0-based) of an event file. */
static size_t record_offset(const char *path, int k)
{
    size_t n, off = 0;
    unsigned char *b = (unsigned char *)kit_must_read(path, &n);
    for (int i = 0; i < k; i++) {
        uint64_t len;
        memcpy(&len, b + off, 8);
        off += 16 + len;
    }
    free(b);
    return off;
}

static void assert_read_fails_with(const char *path, const char *prefix)
{
    struct tfevents_scalar *v = (void *)1;
    int nv = -1;
    ck_assert_int_eq(tfevents_read_scalars(path, &v, &nv), -1);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(nv, 0);
    ck_assert_msg(strncmp(runfiles_last_error(), prefix, strlen(prefix)) == 0, "got \"%s\", want \"%s...\"", runfiles_last_error(),
                  prefix);
}

START_TEST(test_tfe_corruptions)
{
    double t0, t1;
    const char *path = write_events(&t0, &t1);
    size_t n, r2 = record_offset(path, 2);
    unsigned char *orig = (unsigned char *)kit_must_read(path, &n);
    char want[512];

    flip_byte(path, (long)r2 + 14);   /* inside record 2's data */
    snprintf(want, sizeof want, "tfevents_read_scalars: %s: record 2 at byte %zu: data CRC mismatch (stored 0x", path,
             r2);
    assert_read_fails_with(path, want);

    write_all(path, orig, n);
    flip_byte(path, (long)r2 + 1);    /* record 2's length */
    snprintf(want, sizeof want, "tfevents_read_scalars: %s: record 2 at byte %zu: length CRC mismatch (stored 0x", path,
             r2);
    assert_read_fails_with(path, want);

    write_all(path, orig, n);
    flip_byte(path, (long)r2 + 8);    /* record 2's length CRC */
    assert_read_fails_with(path, want);

    size_t r4 = record_offset(path, 4);
    write_all(path, orig, n - 3);     /* the last record cut short */
    uint64_t len4;
    memcpy(&len4, orig + r4, 8);
    snprintf(want, sizeof want,
             "tfevents_read_scalars: %s: record 4 at byte %zu: length %llu runs past the end of the file (%zu bytes "
             "left)", path, r4, (unsigned long long)len4, n - 3 - r4 - 12);
    assert_read_fails_with(path, want);
    ck_assert_str_eq(runfiles_last_error(), want);

    write_all(path, orig, r4 + 5);    /* a header cut short */
    snprintf(want, sizeof want, "tfevents_read_scalars: %s: record 4 at byte %zu: truncated header (5 of 12 bytes)",
             path, r4);
    assert_read_fails_with(path, want);
    ck_assert_str_eq(runfiles_last_error(), want);

    /* well framed, but record 0 is a scalar event: not an event file */
    write_all(path, orig + r2, n - r2);
    snprintf(want, sizeof want,
             "tfevents_read_scalars: %s: record 0 at byte 0: the first event is not a file_version \"brain.Event:*\"",
             path);
    assert_read_fails_with(path, want);
    ck_assert_str_eq(runfiles_last_error(), want);

    write_all(path, "", 0);
    snprintf(want, sizeof want, "tfevents_read_scalars: %s: empty file", path);
    assert_read_fails_with(path, want);
    free(orig);
}
END_TEST

START_TEST(test_tfe_open_errors)
{
    write_all(P("file"), "x", 1);
    ck_assert_ptr_null(tfevents_open(P("file/tb")));
    ASSERT_ERR("tfevents_open: cannot create directory %s: Not a directory", P("file/tb"));
    ck_assert_ptr_null(tfevents_open(P("file")));
    ASSERT_ERR("tfevents_open: cannot create directory %s: Not a directory", P("file"));
}
END_TEST

/* ---- metrics ----------------------------------------------------------------- */

static const char *cols[4] = { "env_steps", "wall_s", "return_mean", "loss" };

START_TEST(test_metrics_rows)
{
    struct metrics_log *m = metrics_open(P("run"), cols, 4, false);
    ck_assert_msg(m != NULL, "%s", runfiles_last_error());
    double rows[3][4] = {
        { 1000, 0.5, 12.25, NAN },
        { 2000, 1.0 / 3, 0.1, 1e-300 },
        { 9007199254740993.0, -INFINITY, INFINITY, -2.5e17 },
    };
    for (int i = 0; i < 3; i++) ck_assert_int_eq(metrics_write(m, rows[i]), 0);
    metrics_close(m);

    size_t n;
    char *csv = kit_must_read(P("run/metrics.csv"), &n);
    ck_assert_str_eq(csv, "env_steps,wall_s,return_mean,loss\n"
                          "1000,0.5,12.25,\n"
                          "2000,0.3333333333333333,0.1,1e-300\n"
                          "9007199254740992,-inf,inf,-2.5e+17\n");
    /* every cell reads back to the same double */
    char *line = strchr(csv, '\n') + 1;
    for (int i = 0; i < 3; i++) {
        for (int c = 0; c < 4; c++) {
            char *end;
            if (isnan(rows[i][c])) {
                ck_assert(*line == ',' || *line == '\n');
                end = line;
            } else {
                ck_assert(strtod(line, &end) == rows[i][c]);
            }
            ck_assert_int_eq(*end, c < 3 ? ',' : '\n');
            line = end + 1;
        }
    }
    free(csv);

    char *jl = kit_must_read(P("run/metrics.jsonl"), &n);
    ck_assert_str_eq(jl, "{\"env_steps\":1000,\"wall_s\":0.5,\"return_mean\":12.25,\"loss\":null}\n"
                         "{\"env_steps\":2000,\"wall_s\":0.3333333333333333,\"return_mean\":0.1,\"loss\":1e-300}\n"
                         "{\"env_steps\":9007199254740992,\"wall_s\":-1e999,\"return_mean\":1e999,"
                         "\"loss\":-2.5e+17}\n");
    char *p = jl;
    for (int i = 0; i < 3; i++) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        cJSON *o = cJSON_Parse(p);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(cJSON_GetArraySize(o), 4);
        int c = 0;
        for (cJSON *x = o->child; x; x = x->next, c++) {
            ck_assert_str_eq(x->string, cols[c]);
            if (isnan(rows[i][c]))
                ck_assert(cJSON_IsNull(x));
            else
                ck_assert(cJSON_IsNumber(x) && x->valuedouble == rows[i][c]);
        }
        cJSON_Delete(o);
        p = nl + 1;
    }
    free(jl);
}
END_TEST

START_TEST(test_metrics_resume)
{
    struct metrics_log *m = metrics_open(P("run"), cols, 4, false);
    ck_assert_int_eq(metrics_write(m, (double[]){ 1, 2, 3, 4 }), 0);
    metrics_close(m);
    m = metrics_open(P("run"), cols, 4, true);
    ck_assert_msg(m != NULL, "%s", runfiles_last_error());
    ck_assert_int_eq(metrics_write(m, (double[]){ 5, 6, 7, 8 }), 0);
    metrics_close(m);
    size_t n;
    char *csv = kit_must_read(P("run/metrics.csv"), &n);
    ck_assert_str_eq(csv, "env_steps,wall_s,return_mean,loss\n1,2,3,4\n5,6,7,8\n");
    free(csv);
    char *jl = kit_must_read(P("run/metrics.jsonl"), &n);
    ck_assert_str_eq(jl, "{\"env_steps\":1,\"wall_s\":2,\"return_mean\":3,\"loss\":4}\n"
                         "{\"env_steps\":5,\"wall_s\":6,\"return_mean\":7,\"loss\":8}\n");
    free(jl);

    ck_assert_ptr_null(metrics_open(P("run"), cols, 3, true));
    ASSERT_ERR("metrics_open: %s: has columns env_steps,wall_s,return_mean,loss, not env_steps,wall_s,return_mean",
               P("run/metrics.csv"));
    /* a fresh open truncates */
    m = metrics_open(P("run"), cols, 2, false);
    ck_assert_ptr_nonnull(m);
    metrics_close(m);
    csv = kit_must_read(P("run/metrics.csv"), &n);
    ck_assert_str_eq(csv, "env_steps,wall_s\n");
    free(csv);
    /* resume with nothing there starts afresh */
    m = metrics_open(P("new"), cols, 1, true);
    ck_assert_ptr_nonnull(m);
    metrics_close(m);
    csv = kit_must_read(P("new/metrics.csv"), &n);
    ck_assert_str_eq(csv, "env_steps\n");
    free(csv);
}
END_TEST

START_TEST(test_metrics_errors)
{
    const char *dup[2] = { "a", "a" }, *comma[1] = { "a,b" }, *empty[1] = { "" };
    ck_assert_ptr_null(metrics_open(P("run"), dup, 2, false));
    ck_assert_str_eq(runfiles_last_error(), "metrics_open: duplicate column \"a\"");
    ck_assert_ptr_null(metrics_open(P("run"), comma, 1, false));
    ck_assert_str_eq(runfiles_last_error(), "metrics_open: column \"a,b\" holds '\"', ',' or a line break");
    ck_assert_ptr_null(metrics_open(P("run"), empty, 1, false));
    ck_assert_str_eq(runfiles_last_error(), "metrics_open: column 0 has no name");
    ck_assert_ptr_null(metrics_open(P("run"), cols, 0, false));
    ck_assert_str_eq(runfiles_last_error(), "metrics_open: no columns");

    write_all(P("file"), "x", 1);
    ck_assert_ptr_null(metrics_open(P("file/run"), cols, 4, false));
    ASSERT_ERR("metrics_open: cannot create directory %s: Not a directory", P("file/run"));
    ck_assert_int_eq(metrics_write_config_kv(P("file/run"), cols, cols, 1), -1);
    ASSERT_ERR("metrics_write_config: cannot create directory %s: Not a directory", P("file/run"));

    /* a metrics file that is a link (to /dev/full here) or a FIFO: refused,
     * never written through (issue 24: was the way to fake a full disk) */
    ck_assert_int_eq(mkdir(P("full"), 0777), 0);
    ck_assert_int_eq(symlink("/dev/full", P("full/metrics.csv")), 0);
    ck_assert_ptr_null(metrics_open(P("full"), cols, 4, false));
    ASSERT_ERR("metrics_open: %s: is a symbolic link: a run's files are never followed", P("full/metrics.csv"));
    ck_assert_ptr_null(metrics_open(P("full"), cols, 4, true));
    ASSERT_ERR("metrics_open: %s: is a symbolic link: a run's files are never followed", P("full/metrics.csv"));
    ck_assert_int_eq(mkdir(P("fifo"), 0777), 0);
    ck_assert_int_eq(mkfifo(P("fifo/metrics.csv"), 0600), 0);
    ck_assert_ptr_null(metrics_open(P("fifo"), cols, 4, false));
    ASSERT_ERR("metrics_open: %s: is a FIFO, not a regular file", P("fifo/metrics.csv"));
    ck_assert_ptr_null(metrics_open(P("fifo"), cols, 4, true));   /* was: waited for a writer */
    ASSERT_ERR("metrics_open: %s: is a FIFO, not a regular file", P("fifo/metrics.csv"));
    /* a write that fails (files over RLIMIT_FSIZE fail with EFBIG): said,
     * and said again */
    struct metrics_log *m = metrics_open(P("full2"), cols, 4, false);
    ck_assert_msg(m != NULL, "%s", runfiles_last_error());
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = (struct rlimit){ 10, old.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ck_assert_int_eq(metrics_write(m, (double[]){ 1, 2, 3, 4 }), -1);
    ASSERT_ERR("metrics_write: %s: File too large", P("full2/metrics.csv"));
    ck_assert_int_eq(metrics_write(m, (double[]){ 1, 2, 3, 4 }), -1);
    ASSERT_ERR("metrics_write: %s: File too large", P("full2/metrics.csv"));
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    metrics_close(m);
}
END_TEST

START_TEST(test_metrics_config)
{
    const char *keys[3] = { "env", "seed", "lr" }, *values[3] = { "CartPole-v1", "42", "0.01" };
    ck_assert_int_eq(metrics_write_config_kv(P("run"), keys, values, 3), 0);
    size_t n;
    char *text = kit_must_read(P("run/config.json"), &n);
    cJSON *o = cJSON_Parse(text);
    ck_assert_ptr_nonnull(o);
    int i = 0;
    for (cJSON *x = o->child; x; x = x->next, i++) {
        ck_assert_str_eq(x->string, keys[i]);
        ck_assert_str_eq(x->valuestring, values[i]);
    }
    ck_assert_int_eq(i, 3);
    cJSON_Delete(o);
    free(text);

    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "hidden", 128);
    cJSON_AddBoolToObject(o, "async", 1);
    ck_assert_int_eq(metrics_write_config(P("run"), o), 0);
    text = kit_must_read(P("run/config.json"), &n);
    cJSON *back = cJSON_Parse(text);
    ck_assert(cJSON_Compare(o, back, 1));
    cJSON_Delete(back);
    cJSON_Delete(o);
    free(text);

    const char *dk[2] = { "a", "a" };
    ck_assert_int_eq(metrics_write_config_kv(P("run"), dk, dk, 2), -1);
    ck_assert_str_eq(runfiles_last_error(), "metrics_write_config_kv: duplicate key \"a\"");
    char names[256];
    list_dir(P("run"), names, sizeof names);
    ck_assert_str_eq(names, "config.json");
}
END_TEST

/* ---- checkpoints ------------------------------------------------------------ */

static unsigned char policy[1000];
static const double optim_state[3] = { 0.9, 0.999, 1e-8 };

static void write_ckpt(const char *d, int64_t step, int keep)
{
    for (int i = 0; i < 1000; i++) policy[i] = (unsigned char)(i * 7 + step);
    struct ckpt_section s[3] = {
        { "policy", policy, sizeof policy },
        { "optim", optim_state, sizeof optim_state },
        { "counters", NULL, 0 },
    };
    ck_assert_msg(ckpt_write(d, step, s, 3, keep) == 0, "%s", runfiles_last_error());
}

static const char *ckpt_path(int64_t step)
{
    static char b[4][256];
    static int k;
    char *p = b[k++ % 4];
    snprintf(p, 256, "%s/ck/ckpt-%012lld.trib", dir, (long long)step);
    return p;
}

START_TEST(test_ckpt_roundtrip)
{
    write_ckpt(P("ck"), 100, 0);
    char names[256];
    list_dir(P("ck"), names, sizeof names);
    ck_assert_str_eq(names, "ckpt-000000000100.trib");
    struct ckpt *c = ckpt_load(ckpt_path(100));
    ck_assert_msg(c != NULL, "%s", runfiles_last_error());
    ck_assert_int_eq(c->step, 100);
    ck_assert_str_eq(c->path, ckpt_path(100));
    ck_assert_int_eq(c->n_sections, 3);
    size_t sz;
    const void *p = ckpt_get(c, "policy", &sz);
    ck_assert_uint_eq(sz, 1000);
    ck_assert_int_eq(memcmp(p, policy, 1000), 0);
    p = ckpt_get(c, "optim", &sz);
    ck_assert_uint_eq(sz, sizeof optim_state);
    ck_assert_int_eq(memcmp(p, optim_state, sz), 0);
    ck_assert_ptr_nonnull(ckpt_get(c, "counters", &sz));
    ck_assert_uint_eq(sz, 0);
    ck_assert_ptr_null(ckpt_get(c, "rng", NULL));
    ASSERT_ERR("ckpt: %s: no section \"rng\" (has: policy, optim, counters)", ckpt_path(100));
    ckpt_free(c);

    /* the layout: header, sections, CRC of everything before it */
    size_t n;
    unsigned char *b = (unsigned char *)kit_must_read(ckpt_path(100), &n);
    ck_assert_uint_eq(n, 32 + (4 + 6 + 8 + 1000) + (4 + 5 + 8 + 24) + (4 + 8 + 8) + 4);
    ck_assert_int_eq(memcmp(b, "TRIBCKPT\x01\0\0\0\x03\0\0\0", 16), 0);
    uint64_t size;
    int64_t step;
    uint32_t crc;
    memcpy(&size, b + 16, 8);
    memcpy(&step, b + 24, 8);
    memcpy(&crc, b + n - 4, 4);
    ck_assert_uint_eq(size, n);
    ck_assert_int_eq(step, 100);
    ck_assert_uint_eq(crc, crc32c(b, n - 4));
    free(b);

    struct ckpt *latest = NULL;
    char warn[512] = "x";
    ck_assert_int_eq(ckpt_load_latest(P("ck"), &latest, warn, sizeof warn), 1);
    ck_assert_int_eq(latest->step, 100);
    ck_assert_str_eq(warn, "");
    ckpt_free(latest);
}
END_TEST

START_TEST(test_ckpt_keep_last)
{
    for (int s = 1; s <= 5; s++) write_ckpt(P("ck"), s * 10, 3);
    char names[512];
    list_dir(P("ck"), names, sizeof names);
    ck_assert_str_eq(names, "ckpt-000000000030.trib ckpt-000000000040.trib ckpt-000000000050.trib");
    /* a step below the newest (a rollback) is kept even past K */
    write_ckpt(P("ck"), 35, 2);
    list_dir(P("ck"), names, sizeof names);
    ck_assert_str_eq(names, "ckpt-000000000035.trib ckpt-000000000040.trib ckpt-000000000050.trib");
    write_all(P("ck/notes.txt"), "x", 1);
    write_ckpt(P("ck"), 60, 1);
    list_dir(P("ck"), names, sizeof names);
    ck_assert_str_eq(names, "ckpt-000000000060.trib notes.txt");
}
END_TEST

START_TEST(test_ckpt_fallback_truncated)
{
    write_ckpt(P("ck"), 100, 0);
    write_ckpt(P("ck"), 200, 0);
    struct stat st;
    ck_assert_int_eq(stat(ckpt_path(200), &st), 0);
    ck_assert_int_eq(truncate(ckpt_path(200), st.st_size / 2), 0);
    struct ckpt *c = NULL;
    char warn[512], want[512];
    ck_assert_int_eq(ckpt_load_latest(P("ck"), &c, warn, sizeof warn), 1);
    ck_assert_int_eq(c->step, 100);
    snprintf(want, sizeof want, "refused %s: truncated (%lld of %lld bytes); loaded %s", ckpt_path(200),
             (long long)st.st_size / 2, (long long)st.st_size, ckpt_path(100));
    ck_assert_str_eq(warn, want);
    ckpt_free(c);
}
END_TEST

START_TEST(test_ckpt_fallback_crc)
{
    write_ckpt(P("ck"), 100, 0);
    write_ckpt(P("ck"), 200, 0);
    flip_byte(ckpt_path(200), 500);
    size_t n;
    unsigned char *b = (unsigned char *)kit_must_read(ckpt_path(200), &n);
    uint32_t stored;
    memcpy(&stored, b + n - 4, 4);
    uint32_t computed = crc32c(b, n - 4);
    free(b);
    struct ckpt *c = NULL;
    char warn[512], want[512];
    ck_assert_int_eq(ckpt_load_latest(P("ck"), &c, warn, sizeof warn), 1);
    ck_assert_int_eq(c->step, 100);
    snprintf(want, sizeof want, "refused %s: bad CRC (stored 0x%08x, computed 0x%08x); loaded %s", ckpt_path(200),
             stored, computed, ckpt_path(100));
    ck_assert_str_eq(warn, want);
    ckpt_free(c);
    ck_assert_ptr_null(ckpt_load(ckpt_path(200)));
    ASSERT_ERR("ckpt_load: %s: bad CRC (stored 0x%08x, computed 0x%08x)", ckpt_path(200), stored, computed);
}
END_TEST

/* Rewrites a checkpoint with the 4 bytes at off replaced and the CRC made
 * valid again: a well-formed file with a lying field. */
static void patch_u32(const char *path, size_t off, uint32_t v, bool fix_crc)
{
    size_t n;
    unsigned char *b = (unsigned char *)kit_must_read(path, &n);
    memcpy(b + off, &v, 4);
    if (fix_crc) {
        uint32_t c = crc32c(b, n - 4);
        memcpy(b + n - 4, &c, 4);
    }
    write_all(path, b, n);
    free(b);
}

static void assert_ckpt_refused(const char *path, const char *why)
{
    ck_assert_ptr_null(ckpt_load(path));
    ASSERT_ERR("ckpt_load: %s: %s", path, why);
}

START_TEST(test_ckpt_refusals)
{
    const char *p = ckpt_path(7);
    write_ckpt(P("ck"), 7, 0);
    size_t n;
    unsigned char *orig = (unsigned char *)kit_must_read(p, &n);

    patch_u32(p, 0, 0x4b434950, false);
    assert_ckpt_refused(p, "bad magic (not a tributary checkpoint)");
    write_all(p, orig, n);
    patch_u32(p, 8, 7, false);
    assert_ckpt_refused(p, "unknown format version 7 (this build reads 1)");
    write_all(p, orig, 5);
    assert_ckpt_refused(p, "truncated (5 bytes)");
    write_all(p, orig, 20);
    assert_ckpt_refused(p, "truncated (20 bytes)");
    write_all(p, "PK\3\4", 4);
    assert_ckpt_refused(p, "bad magic (not a tributary checkpoint)");
    unsigned char *longer = calloc(1, n + 3);
    memcpy(longer, orig, n);
    write_all(p, longer, n + 3);
    free(longer);
    assert_ckpt_refused(p, "3 bytes after the end recorded in its header");

    /* lying lengths under a valid CRC: refused before any allocation */
    write_all(p, orig, n);
    patch_u32(p, 32 + 4 + 6, 0xfffffff0u, true);   /* policy's size, low half */
    char want[256];
    snprintf(want, sizeof want, "section 0: 4294967280 bytes past the end (%zu left)", n - 4 - (32 + 4 + 6 + 8));
    assert_ckpt_refused(p, want);
    write_all(p, orig, n);
    patch_u32(p, 32, 0, true);                      /* policy's name length */
    assert_ckpt_refused(p, "section 0: name length 0 outside 1..255");
    write_all(p, orig, n);
    patch_u32(p, 12, 2, true);                      /* section count */
    assert_ckpt_refused(p, "20 bytes between the last section and the CRC");
    write_all(p, orig, n);
    patch_u32(p, 12, 4, true);
    assert_ckpt_refused(p, "section 3: header past the end");
    write_all(p, orig, n);
    patch_u32(p, 12, 100000, true);
    assert_ckpt_refused(p, "100000 sections (at most 4096)");
    write_all(p, orig, n);
    unlink(p);
    assert_ckpt_refused(p, "No such file or directory");
    free(orig);
}
END_TEST

START_TEST(test_ckpt_duplicate_section_on_disk)
{
    /* two sections both named "aa", hand-built with a valid CRC */
    unsigned char b[32 + 2 * (4 + 2 + 8 + 1) + 4] = "TRIBCKPT";
    uint32_t v = 1, nsec = 2;
    uint64_t size = sizeof b, step = 3, one = 1;
    memcpy(b + 8, &v, 4);
    memcpy(b + 12, &nsec, 4);
    memcpy(b + 16, &size, 8);
    memcpy(b + 24, &step, 8);
    size_t off = 32;
    for (int i = 0; i < 2; i++) {
        uint32_t nl = 2;
        memcpy(b + off, &nl, 4);
        memcpy(b + off + 4, "aa", 2);
        memcpy(b + off + 6, &one, 8);
        b[off + 14] = (unsigned char)i;
        off += 15;
    }
    uint32_t c = crc32c(b, off);
    memcpy(b + off, &c, 4);
    ck_assert_int_eq(mkdir(P("ck"), 0777), 0);
    write_all(ckpt_path(3), b, sizeof b);
    assert_ckpt_refused(ckpt_path(3), "section 1: duplicate name \"aa\"");
}
END_TEST

START_TEST(test_ckpt_all_bad_and_empty)
{
    struct ckpt *c = (void *)1;
    char warn[256] = "x";
    ck_assert_int_eq(ckpt_load_latest(P("none"), &c, warn, sizeof warn), 0);
    ck_assert_ptr_null(c);
    ck_assert_str_eq(warn, "");
    ck_assert_int_eq(mkdir(P("ck"), 0777), 0);
    write_all(P("ck/other.trib"), "x", 1);
    ck_assert_int_eq(ckpt_load_latest(P("ck"), &c, warn, sizeof warn), 0);

    write_ckpt(P("ck"), 100, 0);
    write_ckpt(P("ck"), 200, 0);
    struct stat st;
    ck_assert_int_eq(stat(ckpt_path(100), &st), 0);
    ck_assert_int_eq(truncate(ckpt_path(100), 40), 0);
    patch_u32(ckpt_path(200), 0, 0, false);
    ck_assert_int_eq(ckpt_load_latest(P("ck"), &c, warn, sizeof warn), -1);
    ck_assert_ptr_null(c);
    ck_assert_str_eq(warn, "");
    ASSERT_ERR("ckpt_load_latest: %s: no checkpoint validates: ckpt-000000000200.trib: bad magic (not a tributary "
               "checkpoint); ckpt-000000000100.trib: truncated (40 of %lld bytes)",
               P("ck"), (long long)st.st_size);
}
END_TEST

START_TEST(test_ckpt_write_errors)
{
    struct ckpt_section s[2] = { { "a", "x", 1 }, { "a", "y", 1 } };
    ck_assert_int_eq(ckpt_write(P("ck"), 1, s, 2, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "ckpt_write: duplicate section name \"a\"");
    ck_assert_int_eq(ckpt_write(P("ck"), -1, s, 1, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "ckpt_write: negative step -1");
    s[1] = (struct ckpt_section){ "", "y", 1 };
    ck_assert_int_eq(ckpt_write(P("ck"), 1, s, 2, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "ckpt_write: section 1: name must have 1..255 bytes");
    s[1] = (struct ckpt_section){ "b", NULL, 3 };
    ck_assert_int_eq(ckpt_write(P("ck"), 1, s, 2, 0), -1);
    ck_assert_str_eq(runfiles_last_error(), "ckpt_write: section \"b\": NULL data of 3 bytes");
    ck_assert(!exists(P("ck")));

    write_all(P("file"), "x", 1);
    ck_assert_int_eq(ckpt_write(P("file/ck"), 1, s, 1, 0), -1);
    ASSERT_ERR("ckpt_write: cannot create directory %s: Not a directory", P("file/ck"));
    if (geteuid() != 0) {   /* root writes through a mode-0555 directory */
        ck_assert_int_eq(mkdir(P("ro"), 0555), 0);
        ck_assert_int_eq(ckpt_write(P("ro"), 1, s, 1, 0), -1);
        ASSERT_ERR("ckpt_write: %s/ckpt-000000000001.trib: Permission denied", P("ro"));
    } else {
        fprintf(stderr, "test_ckpt_write_errors: running as root: the mode-0555 directory case is skipped\n");
    }
}
END_TEST

/* ---- policy file ------------------------------------------------------------- */

/* The architecture of tests/fuzz's seed policy-4-8-2-critic (written by
 * fuzz_gen_file_seeds before the policy file left rl/) and its nets from
 * seed 1: params gets the actor's then the critic's parameters. */
static const struct policy_arch SEED_ARCH = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 },
                                              .value_head = true };

static int seed_nets(struct nn_module **actor, struct nn_module **critic, struct tensor **params)
{
    ck_assert_int_eq(policy_arch_build(&SEED_ARCH, 1, actor, critic), 0);
    int n = 0;
    for (int i = 0; i < (*actor)->n_params; i++) params[n++] = (*actor)->params[i];
    for (int i = 0; i < (*critic)->n_params; i++) params[n++] = (*critic)->params[i];
    return n;
}

START_TEST(test_policy_file_bytes)
{
    struct nn_module *actor, *critic;
    struct tensor *params[POLICY_MAX_TENSORS];
    int n = seed_nets(&actor, &critic, params);
    ck_assert_int_eq(n, 8);
    ck_assert_int_eq(policy_arch_param_count(&SEED_ARCH), (4 + 1) * 8 + (8 + 1) * 2 + (4 + 1) * 8 + (8 + 1) * 1);
    ck_assert_msg(policy_file_save(P("p.safetensors"), &SEED_ARCH, "CartPole-v1", NULL, n, params) == 0, "%s",
                  runfiles_last_error());
    size_t got_n, want_n;
    unsigned char *got = (unsigned char *)kit_must_read(P("p.safetensors"), &got_n), *want = (unsigned char *)kit_must_read(POLICY_SEED, &want_n);
    ck_assert_uint_eq(got_n, want_n);
    ck_assert_msg(memcmp(got, want, got_n) == 0, "policy file differs from %s", POLICY_SEED);
    free(got);
    free(want);

    struct policy_arch a;
    char env[64];
    struct nn_module *ra, *rc;
    ck_assert_msg(policy_file_load(POLICY_SEED, &a, env, sizeof env, &ra, &rc) == 0, "%s", runfiles_last_error());
    ck_assert_str_eq(env, "CartPole-v1");
    ck_assert(a.obs_dim == 4 && a.act_dim == 2 && a.n_hidden == 1 && a.hidden[0] == 8 && a.value_head &&
              !a.gaussian && !a.tanh && a.dropout == 0);
    ck_assert_ptr_nonnull(rc);
    for (int i = 0; i < n; i++) {
        struct tensor *t = i < ra->n_params ? ra->params[i] : rc->params[i - ra->n_params];
        ck_assert(tensor_same_shape(t, params[i]));
        ck_assert(memcmp(tensor_data(t), tensor_data(params[i]), tensor_nbytes(t)) == 0);
    }
    nn_module_free(ra);
    nn_module_free(rc);
    /* without a critic asked for, the actor alone */
    ck_assert_int_eq(policy_file_load(POLICY_SEED, &a, env, sizeof env, &ra, NULL), 0);
    ck_assert_int_eq(ra->n_params, 4);
    nn_module_free(ra);
    nn_module_free(actor);
    nn_module_free(critic);
}
END_TEST

/* The seed policy's tensors and metadata rewritten into path, with `drop`
 * (a tensor name or NULL) left out, `extra` (or NULL) added, tensor `nan`
 * (or NULL) holding -inf at element 1, and metadata key `key` (or NULL)
 * set to `value`. */
static void crafted_policy(const char *path, const char *drop, const char *extra, const char *ninf, const char *key,
                           const char *value)
{
    struct safetensors *st = safetensors_load(POLICY_SEED);
    ck_assert_msg(st != NULL, "%s", runfiles_last_error());
    struct safetensors_entry e[16];
    struct tensor *own[16];
    int n = 0;
    for (int i = 0; i < st->n; i++) {
        if (drop && strcmp(st->names[i], drop) == 0) continue;
        own[n] = tensor_clone_to(st->tensors[i], DEVICE_CPU);
        if (ninf && strcmp(st->names[i], ninf) == 0) ((float *)tensor_data(own[n]))[1] = -INFINITY;
        e[n] = (struct safetensors_entry){ st->names[i], own[n] };
        n++;
    }
    if (extra) {
        own[n] = tensor_from_f32(1, (int64_t[]){ 1 }, (float[]){ 0 });
        e[n] = (struct safetensors_entry){ extra, own[n] };
        n++;
    }
    struct safetensors_meta m[16];
    for (int i = 0; i < st->n_meta; i++)
        m[i] = (struct safetensors_meta){ st->meta[i].key,
                                          key && strcmp(key, st->meta[i].key) == 0 ? value : st->meta[i].value };
    ck_assert_msg(safetensors_save(path, e, n, m, st->n_meta) == 0, "%s", runfiles_last_error());
    for (int i = 0; i < n; i++) tensor_free(own[i]);
    safetensors_free(st);
}

START_TEST(test_policy_file_refusals)
{
    static const struct {
        const char *drop, *extra, *ninf, *key, *value, *why;
    } cases[] = {
        { NULL, NULL, "actor.2.bias", NULL, NULL, "parameter actor.2.bias[1] is -inf" },
        { "critic.2.bias", "x", NULL, NULL, NULL, "no tensor 'critic.2.bias'" },   /* as many bytes */
        { NULL, "x", NULL, NULL, NULL, "9 tensors, the architecture has 8" },
        { NULL, NULL, NULL, "format", "tributary-policy-0",
          "not a tributary policy (metadata format is not 'tributary-policy-1')" },
        { NULL, NULL, NULL, "obs_dim", "65537", "metadata 'obs_dim' missing or not in 1..65536" },
        { NULL, NULL, NULL, "act_dim", "1", "'actor.2.weight' is f32 [2,8], expected f32 [1,8]" },
        { NULL, NULL, NULL, "head", "beta", "metadata head/activation/hidden/value_head/env/dropout missing or unknown" },
        { NULL, NULL, NULL, "dropout", "1", "bad dropout '1'" },
        { NULL, NULL, NULL, "hidden", "8,x", "bad hidden sizes '8,x'" },
        { NULL, NULL, NULL, "hidden", "", "no hidden sizes" },
        { NULL, NULL, NULL, "hidden", "8,8,8,8,8", "bad hidden sizes '8,8,8,8,8'" },
        { NULL, NULL, NULL, "hidden", "60000",
          "the architecture has 780003 parameters (3120012 bytes), the file holds 428 bytes of them" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = P("bad.safetensors");
        crafted_policy(path, cases[i].drop, cases[i].extra, cases[i].ninf, cases[i].key, cases[i].value);
        struct policy_arch a;
        char env[64];
        struct nn_module *actor = (void *)1, *critic = (void *)1;
        ck_assert_int_eq(policy_file_load(path, &a, env, sizeof env, &actor, &critic), -1);
        ASSERT_ERR("policy %s: %s", path, cases[i].why);
        ck_assert_ptr_null(actor);
        ck_assert_ptr_null(critic);
    }
    /* a file that is no safetensors: the reader's own message */
    write_all(P("junk"), "junk", 4);
    struct policy_arch a;
    char env[64];
    struct nn_module *actor, *critic;
    ck_assert_int_eq(policy_file_load(P("junk"), &a, env, sizeof env, &actor, &critic), -1);
    ASSERT_ERR("safetensors_load: %s: 4 bytes, too short for the 8-byte header length", P("junk"));
}
END_TEST

int main(void)
{
    return KIT_RUN("runfiles",
             { "crc32c", 0, .tests = { test_crc32c_vectors } },
             { "safetensors", 0, .setup = setup, .teardown = teardown, .tests = { test_st_roundtrip,
               test_st_known_bytes, test_st_corruptions, test_st_save_errors, test_st_cuda },
               .setup_once = base_setup, .teardown_once = base_teardown },
             { "tfevents", 0, .setup = setup, .teardown = teardown, .tests = { test_tfe_records,
               test_tfe_corruptions, test_tfe_open_errors }, .setup_once = base_setup,
               .teardown_once = base_teardown },
             { "metrics", 0, .setup = setup, .teardown = teardown, .tests = { test_metrics_rows,
               test_metrics_resume, test_metrics_errors, test_metrics_config }, .setup_once = base_setup,
               .teardown_once = base_teardown },
             { "ckpt", 0, .setup = setup, .teardown = teardown, .tests = { test_ckpt_roundtrip,
               test_ckpt_keep_last, test_ckpt_fallback_truncated, test_ckpt_fallback_crc, test_ckpt_refusals,
               test_ckpt_duplicate_section_on_disk, test_ckpt_all_bad_and_empty, test_ckpt_write_errors },
               .setup_once = base_setup, .teardown_once = base_teardown },
             { "policy_file", 0, .setup = setup, .teardown = teardown, .tests = { test_policy_file_bytes,
               test_policy_file_refusals }, .setup_once = base_setup, .teardown_once = base_teardown });
}
