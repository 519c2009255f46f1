/* Where an owner of a distributed checkpoint may read and write
 * (dist_ckpt.h "Which directories"): the roots, the directories this
 * process saves to or loads from now, a directory walk that follows no
 * link, and reads of regular files only (a shard, a MANIFEST).
 * dist_ckpt.c calls it; it calls only dist_ckpt_manifest.c. */
#define _GNU_SOURCE
#include "optim/dist_ckpt_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/pread.h"
#include "optim/dist_ckpt.h"
#include "optim/dist_ckpt_internal.h"

#define MANIFEST DIST_CKPT_MANIFEST
#define MAX_ROOTS 16

/* ---- where an owner reads and writes (dist_ckpt.h "Which directories") ----------- */

static pthread_mutex_t dirs_mu = PTHREAD_MUTEX_INITIALIZER;

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(trib_xmalloc(n), s, n);
}

static char *roots[MAX_ROOTS];       /* absolute, as given (resolved at each use) */
static int n_roots;
static char **active;                /* this process's dist_ckpt_save/load directories now */
static int n_active, cap_active;

int dist_ckpt_add_root(const char *dir)
{
    if (!dir || !dir[0]) return rpc_set_error("dist_ckpt_add_root: dir is NULL or empty");
    char abs[PATH_MAX];
    if (dir[0] == '/') {
        if (strlen(dir) >= sizeof abs) return rpc_set_error("dist_ckpt_add_root: %s: %s", dir, strerror(ENAMETOOLONG));
        snprintf(abs, sizeof abs, "%s", dir);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return rpc_set_error("dist_ckpt_add_root: the current directory: %s", strerror(errno));
        if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, dir) >= sizeof abs)
            return rpc_set_error("dist_ckpt_add_root: %s: %s", dir, strerror(ENAMETOOLONG));
    }
    pthread_mutex_lock(&dirs_mu);
    int rc = 0;
    if (n_roots == MAX_ROOTS) rc = rpc_set_error("dist_ckpt_add_root: %d roots already (the most)", MAX_ROOTS);
    else roots[n_roots++] = dup_str(abs);
    pthread_mutex_unlock(&dirs_mu);
    return rc;
}

void dist_ckpt_active_add(const char *dir)
{
    pthread_mutex_lock(&dirs_mu);
    if (n_active == cap_active) active = trib_xrealloc(active, (size_t)(cap_active = cap_active ? 2 * cap_active : 4) * sizeof *active);
    active[n_active++] = dup_str(dir);
    pthread_mutex_unlock(&dirs_mu);
}

void dist_ckpt_active_remove(const char *dir)
{
    pthread_mutex_lock(&dirs_mu);
    for (int i = 0; i < n_active; i++)
        if (strcmp(active[i], dir) == 0) {
            free(active[i]);
            active[i] = active[--n_active];
            break;
        }
    pthread_mutex_unlock(&dirs_mu);
}

/* An absolute path without empty, "." or ".." components (nor a trailing '/'). */
bool dist_ckpt_clean_absolute(const char *dir, size_t n)
{
    if (n == 0 || dir[0] != '/' || n >= PATH_MAX) return false;
    if (n == 1) return true;
    for (size_t i = 1, s = 1; i <= n; i++) {
        if (i < n && dir[i] != '/') continue;
        size_t c = i - s;
        if (c == 0 || (c == 1 && dir[s] == '.') || (c == 2 && dir[s] == '.' && dir[s + 1] == '.')) return false;
        if (memchr(dir + s, '\0', c)) return false;
        s = i + 1;
    }
    return true;
}

/* dir (clean, absolute) is one this process is saving to or loading from,
 * or is, or is below, a root (resolved now). */
bool dist_ckpt_dir_allowed(const char *dir)
{
    bool ok = false;
    pthread_mutex_lock(&dirs_mu);
    for (int i = 0; i < n_active && !ok; i++) ok = strcmp(active[i], dir) == 0;
    for (int i = 0; i < n_roots && !ok; i++) {
        char r[PATH_MAX];
        if (!realpath(roots[i], r)) continue;
        size_t n = strlen(r);
        ok = strcmp(r, "/") == 0 || (strncmp(dir, r, n) == 0 && (dir[n] == '\0' || dir[n] == '/'));
    }
    pthread_mutex_unlock(&dirs_mu);
    return ok;
}

/* Opens dir (clean, absolute) one component at a time from "/", following
 * no link. The directory's fd, or -1 with errno. */
int dist_ckpt_open_dir_nofollow(const char *dir)
{
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char comp[NAME_MAX + 1];
    for (const char *p = dir + 1; fd >= 0 && *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > NAME_MAX) {
            close(fd);
            return errno = ENAMETOOLONG, -1;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e2 = errno;
        struct stat st;   /* a link is ENOTDIR to O_DIRECTORY: say ELOOP */
        if (next < 0 && e2 == ENOTDIR && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) e2 = ELOOP;
        close(fd);
        fd = next;
        errno = e2;
        p += n + (e != NULL);
    }
    return fd;
}

/* file is exactly "shard-G-ME.bin" with G in 1..DIST_CKPT_MAX_GENERATION. */
bool dist_ckpt_own_shard_name(const char *file, const char *me)
{
    if (strncmp(file, "shard-", 6) != 0) return false;
    size_t d = 6;
    while (file[d] >= '0' && file[d] <= '9') d++;
    int64_t g;
    if (dist_ckpt_parse_int(file + 6, d - 6, 1, DIST_CKPT_MAX_GENERATION, &g) != DIST_CKPT_NUM_OK) return false;
    char want[160];
    dist_ckpt_shard_file_name(g, me, want, sizeof want);
    return strcmp(file, want) == 0;
}

/* Reads the shard `file` in directory dfd: a regular file (no link, no
 * FIFO, no device) of exactly want bytes, or nothing is read. The buffer, or
 * NULL after rpc_request_fail. */
uint8_t *dist_ckpt_read_shard(struct rpc_request *req, int dfd, const char *file, int64_t want)
{
    int fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return rpc_request_fail(req, "shard %s is missing", file), NULL;
    if (fd < 0 && errno == ELOOP) return rpc_request_fail(req, "shard %s is not a regular file", file), NULL;
    if (fd < 0) return rpc_request_fail(req, "shard %s: %s", file, strerror(errno)), NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0) rpc_request_fail(req, "shard %s: %s", file, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rpc_request_fail(req, "shard %s is not a regular file", file);
    else if ((int64_t)st.st_size != want)
        rpc_request_fail(req, "shard %s does not match the manifest (%lld bytes; the manifest says %lld bytes)", file,
                         (long long)st.st_size, (long long)want);
    else if (!(buf = malloc(want ? (size_t)want : 1)))
        rpc_request_fail(req, "shard %s: %lld bytes: %s", file, (long long)want, strerror(ENOMEM));
    if (buf && !pread_full(fd, buf, (size_t)want, 0)) {
        rpc_request_fail(req, "shard %s: %s", file, errno ? strerror(errno) : "shorter than it was a moment ago");
        free(buf);
        buf = NULL;
    }
    close(fd);
    return buf;
}

/* Reads and parses the manifest `name` (relative to dfd, or a path): a
 * regular file (no link, no FIFO) of at most DIST_CKPT_MAX_MANIFEST_BYTES.
 * 0, or -1 with err saying why (*missing: it does not exist). */
int dist_ckpt_manifest_at(int dfd, const char *name, struct dist_ckpt_manifest *m, bool *missing, char *err, size_t cap)
{
    *missing = false;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return snprintf(err, cap, "%s", errno == ELOOP ? "not a regular file" : strerror(errno)), -1;
    }
    struct stat st;
    int rc = 0;
    char *text = NULL;
    if (fstat(fd, &st) != 0) rc = (snprintf(err, cap, "%s", strerror(errno)), -1);
    else if (!S_ISREG(st.st_mode)) rc = (snprintf(err, cap, "not a regular file"), -1);
    else if (st.st_size > DIST_CKPT_MAX_MANIFEST_BYTES)
        rc = (snprintf(err, cap, "%lld bytes, more than a manifest may hold (%d)", (long long)st.st_size,
                       DIST_CKPT_MAX_MANIFEST_BYTES), -1);
    size_t len = 0;
    if (rc == 0) {
        text = trib_xmalloc((size_t)st.st_size + 1);
        while (len < (size_t)st.st_size) {
            ssize_t k = read(fd, text + len, (size_t)st.st_size - len);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            len += (size_t)k;
        }
    }
    close(fd);
    if (rc == 0) rc = dist_ckpt_manifest_parse(text, len, m, err, cap);
    free(text);
    return rc;
}

/* A save of shard `file` (its name checked) in dfd may not replace a shard
 * of the checkpoint there: its generation must be newer than the MANIFEST's
 * (none: any). 0 or -1 after rpc_request_fail. */
int dist_ckpt_newer_than_checkpoint(struct rpc_request *req, int dfd, const char *file)
{
    int64_t gen = 0;
    const char *g = file + 6;
    dist_ckpt_parse_int(g, strspn(g, "0123456789"), 1, DIST_CKPT_MAX_GENERATION, &gen);
    struct dist_ckpt_manifest *m = trib_xmalloc(sizeof *m);
    char err[256];
    bool missing;
    int rc = 0;
    if (dist_ckpt_manifest_at(dfd, MANIFEST, m, &missing, err, sizeof err) != 0) {
        if (!missing) rc = rpc_request_fail(req, "shard %s: the directory's " MANIFEST ": %s", file, err);
    } else if (gen <= m->generation) {
        rc = rpc_request_fail(req, "shard %s: generation %lld is not newer than the directory's checkpoint (generation %lld)",
                              file, (long long)gen, (long long)m->generation);
    }
    free(m);
    return rc;
}
