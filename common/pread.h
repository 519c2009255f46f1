/* Reading a whole range of a file: pread until n bytes are in, through
 * EINTR and short reads. Header only, below every layer. */
#ifndef TRIB_COMMON_PREAD_H
#define TRIB_COMMON_PREAD_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads n bytes at offset off into buf. false on a read error (errno set)
 * or when the file ends first (errno 0: it is shorter than the caller was
 * told, e.g. it shrank since fstat). */
static inline bool pread_full(int fd, void *buf, size_t n, off_t off)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0;
        if (r <= 0) return false;
        p += r;
        off += r;
        n -= (size_t)r;
    }
    return true;
}

#endif
