/* The file readers' fuzz targets (fuzz_ckpt, fuzz_safetensors) read paths,
 * not buffers: an input becomes the contents of one memfd, opened again by
 * its /proc/self/fd path (a regular file, no disk I/O). Its includer
 * defines _GNU_SOURCE first (memfd_create). */
#ifndef TRIB_TESTS_FUZZ_FILE_H
#define TRIB_TESTS_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file holding exactly data[0..size) (static storage). */
static inline const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-input", MFD_CLOEXEC);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_file");
        abort();
    }
    return path;
}

#endif
