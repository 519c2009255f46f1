/* TensorBoard event-file writer and reader (format in tfevents.h). The
 * protos are packed by protobuf-c's generated code (runfiles/tfevents.proto); the
 * record framing and its masked CRC-32C are done here. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "runfiles/ckpt.h"
#include "runfiles/crc32c.h"
#include "runfiles/runfiles.h"
#include "runfiles/tfevents.h"
#include "runfiles/tfevents.pb-c.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "records are framed in the host's byte order");

#define FRAME 16   /* u64 length + u32 length CRC + u32 data CRC */

struct tfevents_writer {
    FILE *f;
    char *path;
    unsigned char *buf;     /* one framed record, reused */
    size_t cap;
    char error[256];        /* set after the first failed write */
};

uint32_t tfevents_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Frames and writes one Event, flushed. */
static int write_event(struct tfevents_writer *w, const TribTb__Event *ev, const char *who)
{
    if (w->error[0]) return runfiles_set_error("%s: %s", who, w->error);
    size_t len = trib_tb__event__get_packed_size(ev);
    if (len + FRAME > w->cap) {
        w->cap = 2 * (len + FRAME);
        w->buf = trib_xrealloc(w->buf, w->cap);
    }
    uint64_t len64 = len;
    memcpy(w->buf, &len64, 8);
    uint32_t c = tfevents_mask_crc(crc32c(w->buf, 8));
    memcpy(w->buf + 8, &c, 4);
    CHECK(trib_tb__event__pack(ev, w->buf + 12) == len);
    c = tfevents_mask_crc(crc32c(w->buf + 12, len));
    memcpy(w->buf + 12 + len, &c, 4);
    if (fwrite(w->buf, 1, len + FRAME, w->f) != len + FRAME || fflush(w->f) != 0) {
        snprintf(w->error, sizeof w->error, "%s: %s", w->path, strerror(errno ? errno : EIO));
        return runfiles_set_error("%s: %s", who, w->error);
    }
    return 0;
}

struct tfevents_writer *tfevents_open(const char *dir)
{
    if (ckpt_mkdirs(dir, "tfevents_open") != 0) return NULL;
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    char *path = NULL;
    long long stamp = (long long)time(NULL);
    CHECK(asprintf(&path, "%s/events.out.tfevents.%lld.%s", dir, stamp, host) >= 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    /* a second writer in the same second (a resumed run): a numbered suffix,
     * which TensorBoard reads as another event file of the run */
    for (int k = 1; fd < 0 && errno == EEXIST && k < 1000; k++) {
        free(path);
        CHECK(asprintf(&path, "%s/events.out.tfevents.%lld.%s.%d", dir, stamp, host, k) >= 0);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        runfiles_set_error("tfevents_open: %s: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    struct tfevents_writer *w = trib_xcalloc(1, sizeof *w);
    w->f = fdopen(fd, "wb");
    CHECK_ALLOC(w->f);
    w->path = path;
    TribTb__Event ev = TRIB_TB__EVENT__INIT;
    ev.wall_time = now_wall();
    ev.what_case = TRIB_TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)TFEVENTS_FILE_VERSION;
    if (write_event(w, &ev, "tfevents_open") != 0) {
        tfevents_close(w);
        return NULL;
    }
    return w;
}

const char *tfevents_path(const struct tfevents_writer *w) { return w->path; }

int tfevents_add_scalar(struct tfevents_writer *w, const char *tag, float value, int64_t step)
{
    TribTb__Summary__Value v = TRIB_TB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;   /* protobuf-c only reads it */
    v.value_case = TRIB_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    TribTb__Summary__Value *vp = &v;
    TribTb__Summary s = TRIB_TB__SUMMARY__INIT;
    s.n_value = 1;
    s.value = &vp;
    TribTb__Event ev = TRIB_TB__EVENT__INIT;
    ev.wall_time = now_wall();
    ev.step = step;
    ev.what_case = TRIB_TB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev, "tfevents_add_scalar");
}

void tfevents_close(struct tfevents_writer *w)
{
    if (!w) return;
    fclose(w->f);
    free(w->path);
    free(w->buf);
    free(w);
}

/* ---- reading ----------------------------------------------------------------- */

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    int bad = fstat(fileno(f), &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
    if (bad) {
        fclose(f);
        errno = bad;
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        if (!buf) errno = ENOMEM;
        else if (!ferror(f)) errno = EIO;   /* the file shrank since fstat */
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = n;
    return buf;
}

/* Appends ev's simple values to the growing array. */
static void collect(const TribTb__Event *ev, struct tfevents_scalar **v, int *n, int *cap)
{
    if (ev->what_case != TRIB_TB__EVENT__WHAT_SUMMARY || !ev->summary) return;
    for (size_t i = 0; i < ev->summary->n_value; i++) {
        const TribTb__Summary__Value *x = ev->summary->value[i];
        if (x->value_case != TRIB_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE) continue;
        if (*n == *cap) *v = trib_xrealloc(*v, sizeof **v * (size_t)(*cap = *cap ? 2 * *cap : 64));
        (*v)[*n] = (struct tfevents_scalar){ .wall_time = ev->wall_time, .step = ev->step, .value = x->simple_value };
        (*v)[*n].tag = strdup(x->tag ? x->tag : "");
        CHECK_ALLOC((*v)[*n].tag);
        (*n)++;
    }
}

/* Checks one record's framing at buf+off; on success *len is its data size. */
static int check_frame(const unsigned char *buf, size_t size, size_t off, uint64_t *len, char *why, size_t cap)
{
    size_t left = size - off;
    if (left < 12) return snprintf(why, cap, "truncated header (%zu of 12 bytes)", left), -1;
    uint32_t stored, computed = tfevents_mask_crc(crc32c(buf + off, 8));
    memcpy(len, buf + off, 8);
    memcpy(&stored, buf + off + 8, 4);
    if (stored != computed)
        return snprintf(why, cap, "length CRC mismatch (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", stored,
                        computed), -1;
    if (*len > left - 12 || left - 12 - *len < 4)
        return snprintf(why, cap, "length %" PRIu64 " runs past the end of the file (%zu bytes left)", *len, left - 12),
               -1;
    memcpy(&stored, buf + off + 12 + *len, 4);
    computed = tfevents_mask_crc(crc32c(buf + off + 12, (size_t)*len));
    if (stored != computed)
        return snprintf(why, cap, "data CRC mismatch (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", stored,
                        computed), -1;
    return 0;
}

int tfevents_read_scalars(const char *path, struct tfevents_scalar **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t size;
    unsigned char *buf = read_file(path, &size);
    if (!buf) return runfiles_set_error("tfevents_read_scalars: %s: %s", path, strerror(errno));
    if (size == 0) {
        free(buf);
        return runfiles_set_error("tfevents_read_scalars: %s: empty file", path);
    }
    struct tfevents_scalar *v = NULL;
    int n = 0, cap = 0, rec = 0;
    char why[256] = "";
    size_t off = 0;
    for (; off < size; rec++) {
        uint64_t len;
        if (check_frame(buf, size, off, &len, why, sizeof why) != 0) break;
        TribTb__Event *ev = trib_tb__event__unpack(NULL, (size_t)len, buf + off + 12);
        if (!ev) {
            snprintf(why, sizeof why, "not an Event proto");
            break;
        }
        if (rec == 0 && (ev->what_case != TRIB_TB__EVENT__WHAT_FILE_VERSION ||
                         strncmp(ev->file_version, "brain.Event:", 12) != 0))
            snprintf(why, sizeof why, "the first event is not a file_version \"brain.Event:*\"");
        else
            collect(ev, &v, &n, &cap);
        trib_tb__event__free_unpacked(ev, NULL);
        if (why[0]) break;
        off += FRAME + (size_t)len;
    }
    free(buf);
    if (why[0]) {
        tfevents_scalars_free(v, n);
        return runfiles_set_error("tfevents_read_scalars: %s: record %d at byte %zu: %s", path, rec, off, why);
    }
    *out = v;
    *n_out = n;
    return 0;
}

void tfevents_scalars_free(struct tfevents_scalar *v, int n)
{
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i].tag);
    free(v);
}
