/* All-or-nothing files (atomic_file.h). */
#define _GNU_SOURCE
#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/error.h"

TRIB_ERROR_MODULE(atomic_file)
static atomic_uint tmp_counter;


/* Sets the message, "<who>: " (none when who is NULL) then fmt's, and
 * errno = e. Returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(int e, const char *who, const char *fmt, ...)
{
    char *m = atomic_file_error_text.msg;
    size_t cap = sizeof atomic_file_error_text.msg, k = who ? (size_t)snprintf(m, cap, "%s: ", who) : 0;
    if (k >= cap) k = cap - 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m + k, cap - k, fmt, ap);
    va_end(ap);
    errno = e;
    return -1;
}

/* The directory part of path ("." when there is none), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *d = !slash ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
    CHECK_ALLOC(d);
    return d;
}

int atomic_file_open(struct atomic_file *a, const char *path, const char *who)
{
    memset(a, 0, sizeof *a);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return fail(EINVAL, who, "%s: not a file name", path);
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    char *tmp = NULL;
    CHECK(asprintf(&tmp, "%.*s.%s.%d.%u.tmp", dirlen, path, base, (int)getpid(),
                   atomic_fetch_add(&tmp_counter, 1)) >= 0);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return fail(e, who, "%s: %s", path, strerror(e));
    }
    a->f = fdopen(fd, "wb");
    CHECK_ALLOC(a->f);
    a->tmp = tmp;
    a->path = strdup(path);
    CHECK_ALLOC(a->path);
    return 0;
}

int atomic_file_write(struct atomic_file *a, const void *data, size_t n)
{
    if (a->err) return -1;
    errno = 0;
    if (n && fwrite(data, 1, n, a->f) != n) {
        a->err = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

static void release(struct atomic_file *a)
{
    free(a->path);
    free(a->tmp);
    memset(a, 0, sizeof *a);
}

void atomic_file_abort(struct atomic_file *a)
{
    if (!a->tmp) return;
    if (a->f) fclose(a->f);
    unlink(a->tmp);
    release(a);
}

/* fsync of the directory makes the rename durable. Some file systems refuse
 * it (EINVAL): the rename is still done, so that is not a failure. 0, or
 * the errno. */
static int fsync_dir(const char *path)
{
    char *dir = dir_of(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return errno;
    int e = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return e == EINVAL ? 0 : e;
}

int atomic_file_commit(struct atomic_file *a, const char *who)
{
    int e = a->err;
    if (!e && fflush(a->f) != 0) e = errno;
    if (!e && fsync(fileno(a->f)) != 0) e = errno;
    int closed = fclose(a->f);
    a->f = NULL;
    if (!e && closed != 0) e = errno;
    if (!e && rename(a->tmp, a->path) != 0) e = errno;
    if (e) {
        fail(e, who, "%s: %s", a->path, strerror(e));
        unlink(a->tmp);
        release(a);
        errno = e;
        return -1;
    }
    int rc = 0;
    if ((e = fsync_dir(a->path)) != 0) rc = fail(e, who, "%s: fsync of its directory: %s", a->path, strerror(e));
    release(a);
    if (rc) errno = e;
    return rc;
}

int atomic_file_replace(const char *path, const void *data, size_t n, const char *who)
{
    struct atomic_file a;
    if (atomic_file_open(&a, path, who) != 0) return -1;
    atomic_file_write(&a, data, n);
    return atomic_file_commit(&a, who);
}
