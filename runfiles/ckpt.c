/* Checkpoint container (format in ckpt.h), written with common/atomic_file.h,
 * and mkdir -p for the run files. A loaded checkpoint is the file's bytes in one buffer
 * plus one block for the section table and names; every length is checked
 * against the real file size before anything is allocated for it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/check.h"
#include "common/error.h"
#include "common/pread.h"
#include "runfiles/ckpt.h"
#include "runfiles/crc32c.h"
#include "runfiles/runfile.h"
#include "runfiles/runfiles.h"

#define MAGIC "TRIBCKPT"
#define HEADER_SIZE 32
#define TRAILER_SIZE 4
#define MIN_SIZE (HEADER_SIZE + TRAILER_SIZE)

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "run files are written with the host's byte order");

/* ---- directories ------------------------------------------------------------ */

int ckpt_mkdirs(const char *dir, const char *who)
{
    if (!*dir) return runfiles_set_error("%s: empty directory name", who);
    char *p = strdup(dir);
    CHECK_ALLOC(p);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        bool end = *s == '\0';
        if (!end && *s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = runfiles_set_error("%s: cannot create directory %s: %s", who, dir, strerror(errno));
            break;
        }
        if (end) break;
        *s = '/';
    }
    struct stat st;
    if (rc == 0 && stat(dir, &st) != 0)
        rc = runfiles_set_error("%s: cannot create directory %s: %s", who, dir, strerror(errno));
    else if (rc == 0 && !S_ISDIR(st.st_mode))
        rc = runfiles_set_error("%s: cannot create directory %s: %s", who, dir, strerror(ENOTDIR));
    free(p);
    return rc;
}

/* ---- writing ----------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Writes and folds the bytes into the running CRC. */
static void write_crc(struct atomic_file *a, uint32_t *crc, const void *data, size_t n)
{
    *crc = crc32c_update(*crc, data, n);
    atomic_file_write(a, data, n);
}

static int check_sections(const struct ckpt_section *s, int n, uint64_t *total)
{
    if (n < 0 || n > CKPT_MAX_SECTIONS)
        return runfiles_set_error("ckpt_write: %d sections (at most %d)", n, CKPT_MAX_SECTIONS);
    uint64_t size = MIN_SIZE;
    for (int i = 0; i < n; i++) {
        size_t len = s[i].name ? strlen(s[i].name) : 0;
        if (len == 0 || len > CKPT_MAX_NAME)
            return runfiles_set_error("ckpt_write: section %d: name must have 1..%d bytes", i, CKPT_MAX_NAME);
        if (!s[i].data && s[i].size)
            return runfiles_set_error("ckpt_write: section \"%s\": NULL data of %zu bytes", s[i].name, s[i].size);
        for (int j = 0; j < i; j++)
            if (strcmp(s[i].name, s[j].name) == 0)
                return runfiles_set_error("ckpt_write: duplicate section name \"%s\"", s[i].name);
        if (s[i].size > UINT64_MAX / 2 - size) return runfiles_set_error("ckpt_write: sections too large");
        size += 4 + len + 8 + s[i].size;
    }
    *total = size;
    return 0;
}

struct ckpt_file { int64_t step; char *name; };

static int by_step_desc(const void *x, const void *y)
{
    const struct ckpt_file *a = x, *b = y;
    return a->step < b->step ? 1 : a->step > b->step ? -1 : strcmp(b->name, a->name);
}

/* Parses "ckpt-<1..19 digits>.trib". */
static bool parse_ckpt_name(const char *name, int64_t *step)
{
    if (strncmp(name, "ckpt-", 5) != 0) return false;
    const char *d = name + 5;
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || nd > 19 || strcmp(d + nd, ".trib") != 0) return false;
    errno = 0;
    long long v = strtoll(d, NULL, 10);
    if (errno) return false;
    *step = v;
    return true;
}

/* The checkpoint files an open directory lists, highest step first (the
 * count); closes d. */
static int list_dir(DIR *d, struct ckpt_file **out)
{
    int n = 0, cap = 0;
    struct ckpt_file *v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (!parse_ckpt_name(e->d_name, &step)) continue;
        if (n == cap) v = trib_xrealloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
        v[n].step = step;
        v[n].name = strdup(e->d_name);
        CHECK_ALLOC(v[n].name);
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, by_step_desc);
    *out = v;
    return n;
}

/* The checkpoint files of dir, highest step first. Returns the count, or -1
 * with errno set (ENOENT: no such directory). */
static int list_ckpts(const char *dir, struct ckpt_file **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    return d ? list_dir(d, out) : -1;
}

static void free_list(struct ckpt_file *v, int n)
{
    for (int i = 0; i < n; i++) free(v[i].name);
    free(v);
}

/* Deletes the checkpoints of dir beyond the newest `keep` (never `written`),
 * through a descriptor of dir itself: when dir has become a link since the
 * write checked it, it is not opened (O_NOFOLLOW) and nothing is deleted,
 * and a directory swapped in after the open is not the one pruned. */
static void prune(const char *dir, int keep, int64_t written)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    int lfd = dup(fd);
    DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
    if (!d) {
        if (lfd >= 0) close(lfd);
        close(fd);
        return;
    }
    struct ckpt_file *v = NULL;
    int n = list_dir(d, &v);
    for (int i = 0, kept = 0; i < n; i++) {
        if (kept < keep || v[i].step == written) kept++;
        else unlinkat(fd, v[i].name, 0);
    }
    close(fd);
    free_list(v, n);
}

int ckpt_write(const char *dir, int64_t step, const struct ckpt_section *sections, int n, int keep)
{
    if (step < 0) return runfiles_set_error("ckpt_write: negative step %" PRId64, step);
    uint64_t total = 0;
    if (check_sections(sections, n, &total) != 0) return -1;
    if (ckpt_mkdirs(dir, "ckpt_write") != 0) return -1;
    /* the directory the run's checkpoints go to, never one a link leads to
     * (whose older ckpt-*.trib prune would delete) */
    if (runfile_check_dir(dir) != 0) return runfiles_set_error("ckpt_write: %s", runfiles_last_error());
    char *path = NULL;
    CHECK(asprintf(&path, "%s/ckpt-%012" PRId64 ".trib", dir, step) >= 0);
    struct atomic_file a;
    if (atomic_file_open(&a, path, "ckpt_write") != 0) {
        free(path);
        return runfiles_set_error("%s", atomic_file_last_error());
    }
    uint32_t crc = 0;
    unsigned char h[HEADER_SIZE];
    memcpy(h, MAGIC, 8);
    put_u32(h + 8, CKPT_VERSION);
    put_u32(h + 12, (uint32_t)n);
    put_u64(h + 16, total);
    put_u64(h + 24, (uint64_t)step);
    write_crc(&a, &crc, h, sizeof h);
    for (int i = 0; i < n; i++) {
        unsigned char len[8];
        uint32_t nl = (uint32_t)strlen(sections[i].name);
        put_u32(len, nl);
        write_crc(&a, &crc, len, 4);
        write_crc(&a, &crc, sections[i].name, nl);
        put_u64(len, sections[i].size);
        write_crc(&a, &crc, len, 8);
        write_crc(&a, &crc, sections[i].data, sections[i].size);
    }
    unsigned char t[TRAILER_SIZE];
    put_u32(t, crc);
    atomic_file_write(&a, t, sizeof t);
    int rc = atomic_file_commit(&a, "ckpt_write") == 0 ? 0 : runfiles_set_error("%s", atomic_file_last_error());
    free(path);
    if (rc == 0 && keep > 0) prune(dir, keep, step);
    return rc;
}

/* ---- reading ------------------------------------------------------------------ */

/* struct ckpt and what it owns: the file's bytes, and one block holding the
 * section table, the names and the path. */
struct ckpt_mem {
    struct ckpt c;
    unsigned char *buf;
};

/* Checks the fixed header against the real size. */
static int check_header(const unsigned char *h, uint64_t size, char *why, size_t cap)
{
    size_t have = size < HEADER_SIZE ? (size_t)size : HEADER_SIZE;
    if (memcmp(h, MAGIC, have < 8 ? have : 8) != 0)
        return trib_errf(why, cap, "bad magic (not a tributary checkpoint)");
    if (size < 12) return trib_errf(why, cap, "truncated (%" PRIu64 " bytes)", size);
    uint32_t version = get_u32(h + 8);
    if (version != CKPT_VERSION)
        return trib_errf(why, cap, "unknown format version %" PRIu32 " (this build reads %d)", version, CKPT_VERSION);
    if (size < 24) return trib_errf(why, cap, "truncated (%" PRIu64 " bytes)", size);
    uint64_t want = get_u64(h + 16);
    if (want < MIN_SIZE) return trib_errf(why, cap, "bad header: file size %" PRIu64 " is under %d", want, MIN_SIZE);
    if (size < want) return trib_errf(why, cap, "truncated (%" PRIu64 " of %" PRIu64 " bytes)", size, want);
    if (size > want)
        return trib_errf(why, cap, "%" PRIu64 " bytes after the end recorded in its header", size - want);
    return 0;
}

/* Walks the sections of a CRC-checked buffer; with out == NULL only checks
 * and counts name bytes. */
static int walk_sections(const unsigned char *buf, uint64_t size, uint32_t n, struct ckpt_section *out, char *names,
                         size_t *name_bytes, char *why, size_t cap)
{
    uint64_t off = HEADER_SIZE, end = size - TRAILER_SIZE;
    *name_bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (end - off < 4) return trib_errf(why, cap, "section %" PRIu32 ": header past the end", i);
        uint32_t nl = get_u32(buf + off);
        off += 4;
        if (nl == 0 || nl > CKPT_MAX_NAME)
            return trib_errf(why, cap, "section %" PRIu32 ": name length %" PRIu32 " outside 1..%d", i, nl,
                          CKPT_MAX_NAME);
        if (end - off < (uint64_t)nl + 8) return trib_errf(why, cap, "section %" PRIu32 ": header past the end", i);
        const char *name = (const char *)buf + off;
        off += nl;
        uint64_t sz = get_u64(buf + off);
        off += 8;
        if (sz > end - off)
            return trib_errf(why, cap, "section %" PRIu32 ": %" PRIu64 " bytes past the end (%" PRIu64 " left)", i,
                          sz, end - off);
        if (memchr(name, '\0', nl)) return trib_errf(why, cap, "section %" PRIu32 ": name holds a NUL byte", i);
        if (out) {
            memcpy(names, name, nl);
            names[nl] = '\0';
            for (uint32_t j = 0; j < i; j++)
                if (strcmp(out[j].name, names) == 0)
                    return trib_errf(why, cap, "section %" PRIu32 ": duplicate name \"%s\"", i, names);
            out[i] = (struct ckpt_section){ .name = names, .data = buf + off, .size = (size_t)sz };
            names += nl + 1;
        }
        *name_bytes += nl + 1;
        off += sz;
    }
    if (off != end)
        return trib_errf(why, cap, "%" PRIu64 " bytes between the last section and the CRC", end - off);
    return 0;
}

/* The bytes of the file open at fd (size bytes; malloc'd), once its fixed
 * header is checked against that size. NULL with why set. */
static unsigned char *read_checked(int fd, uint64_t size, char *why, size_t cap)
{
    unsigned char h[HEADER_SIZE] = { 0 };
    size_t hn = size < HEADER_SIZE ? (size_t)size : HEADER_SIZE;
    if (!pread_full(fd, h, hn, 0)) {
        trib_errf(why, cap, "read failed: %s", errno ? strerror(errno) : "file shrank");
        return NULL;
    }
    if (check_header(h, size, why, cap) != 0) return NULL;
    unsigned char *buf = malloc((size_t)size);
    if (!buf) {
        trib_errf(why, cap, "cannot allocate %" PRIu64 " bytes", size);
        return NULL;
    }
    if (!pread_full(fd, buf, (size_t)size, 0)) {
        trib_errf(why, cap, "read failed: %s", errno ? strerror(errno) : "file shrank");
        free(buf);
        return NULL;
    }
    return buf;
}

/* A whole file's CRC, its step and its count of sections (into *n). */
static int check_body(const unsigned char *buf, uint64_t size, uint32_t *n, char *why, size_t cap)
{
    uint32_t stored = get_u32(buf + size - TRAILER_SIZE), computed = crc32c(buf, (size_t)size - TRAILER_SIZE);
    if (stored != computed)
        return trib_errf(why, cap, "bad CRC (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", stored, computed);
    if ((int64_t)get_u64(buf + 24) < 0)
        return trib_errf(why, cap, "bad header: negative step %" PRId64, (int64_t)get_u64(buf + 24));
    *n = get_u32(buf + 12);
    if (*n > CKPT_MAX_SECTIONS) return trib_errf(why, cap, "%" PRIu32 " sections (at most %d)", *n, CKPT_MAX_SECTIONS);
    return 0;
}

/* The struct ckpt of a file's checked bytes (buf: taken, freed on
 * failure): its n sections walked twice, to size the block of the table
 * and the names, then to fill it. NULL with why set. */
static struct ckpt *make_ckpt(unsigned char *buf, uint64_t size, uint32_t n, const char *path, char *why,
                              size_t cap)
{
    size_t name_bytes;
    if (walk_sections(buf, size, n, NULL, NULL, &name_bytes, why, cap) != 0) {
        free(buf);
        return NULL;
    }
    size_t plen = strlen(path) + 1;
    struct ckpt_mem *m = trib_xcalloc(1, sizeof *m + n * sizeof(struct ckpt_section) + name_bytes + plen);
    struct ckpt_section *sec = (struct ckpt_section *)(m + 1);
    char *names = (char *)(sec + n);
    if (walk_sections(buf, size, n, sec, names, &name_bytes, why, cap) != 0) {
        free(m);
        free(buf);
        return NULL;
    }
    m->c.path = names + name_bytes;
    memcpy(m->c.path, path, plen);
    m->c.step = (int64_t)get_u64(buf + 24);
    m->c.n_sections = (int)n;
    m->c.sections = sec;
    m->buf = buf;
    return &m->c;
}

/* ckpt_load without the message prefix: on failure why holds the reason.
 * A FIFO or a device is refused without blocking on it; with nofollow (a
 * file found in a run's directory) so is a symbolic link. */
static struct ckpt *load_file(const char *path, bool nofollow, char *why, size_t cap)
{
    int fd = runfile_open_read(path, nofollow, why, cap);
    if (fd < 0) return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) != 0) trib_errf(why, cap, "%s", strerror(errno));
    else buf = read_checked(fd, (uint64_t)st.st_size, why, cap);
    close(fd);
    uint32_t n = 0;
    if (buf && check_body(buf, (uint64_t)st.st_size, &n, why, cap) != 0) {
        free(buf);
        buf = NULL;
    }
    return buf ? make_ckpt(buf, (uint64_t)st.st_size, n, path, why, cap) : NULL;
}

struct ckpt *ckpt_load(const char *path)
{
    char why[256];
    struct ckpt *c = load_file(path, false, why, sizeof why);
    if (!c) runfiles_set_error("ckpt_load: %s: %s", path, why);
    return c;
}

/* Appends printf output to a bounded string (truncating quietly). */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    if (!cap) return;
    size_t len = strnlen(buf, cap);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

int ckpt_load_latest(const char *dir, struct ckpt **out, char *warning, size_t cap)
{
    *out = NULL;
    if (cap) warning[0] = '\0';
    if (runfile_check_dir(dir) != 0) return runfiles_set_error("ckpt_load_latest: %s", runfiles_last_error());
    struct ckpt_file *v;
    int n = list_ckpts(dir, &v);
    if (n < 0) {
        if (errno == ENOENT) return 0;
        return runfiles_set_error("ckpt_load_latest: %s: %s", dir, strerror(errno));
    }
    char refused[512] = "";
    for (int i = 0; i < n && !*out; i++) {
        char *p = NULL, why[256];
        CHECK(asprintf(&p, "%s/%s", dir, v[i].name) >= 0);
        /* a link or a FIFO among a run's checkpoints is no damaged file to
         * skip: the resume is refused, naming it */
        if (runfile_check_file(p) != 0) {
            runfiles_set_error("ckpt_load_latest: %s", runfiles_last_error());
            free(p);
            free_list(v, n);
            if (cap) warning[0] = '\0';
            return -1;
        }
        *out = load_file(p, true, why, sizeof why);
        if (*out) {
            if (i) append(warning, cap, "loaded %s", p);
        } else {
            append(warning, cap, "refused %s: %s; ", p, why);
            append(refused, sizeof refused, "%s%s: %s", i ? "; " : "", v[i].name, why);
        }
        free(p);
    }
    free_list(v, n);
    if (*out) return 1;
    if (cap) warning[0] = '\0';
    if (n == 0) return 0;
    return runfiles_set_error("ckpt_load_latest: %s: no checkpoint validates: %s", dir, refused);
}

const void *ckpt_get(const struct ckpt *c, const char *name, size_t *size)
{
    for (int i = 0; i < c->n_sections; i++)
        if (strcmp(c->sections[i].name, name) == 0) {
            if (size) *size = c->sections[i].size;
            return c->sections[i].data;
        }
    char has[256] = "";
    for (int i = 0; i < c->n_sections; i++) append(has, sizeof has, "%s%s", i ? ", " : "", c->sections[i].name);
    runfiles_set_error("ckpt: %s: no section \"%s\" (has: %s)", c->path, name, has);
    return NULL;
}

void ckpt_free(struct ckpt *c)
{
    if (!c) return;
    struct ckpt_mem *m = (struct ckpt_mem *)c;
    free(m->buf);
    free(m);
}
