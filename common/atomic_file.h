/* All-or-nothing files: the one writer of every file that replaces another
 * whole (checkpoints, distributed-checkpoint shards and manifests,
 * safetensors, config.json). Below every layer.
 *
 * Contract:
 *  - The new content is written to a temporary file in the final file's
 *    own directory (".<name>.<pid>.<n>.tmp", mode 0666 & ~umask), then
 *    fflush, fsync, close, rename over the final path, fsync of the
 *    directory. A reader (or the next process after a crash or a power cut)
 *    sees the old file whole or the new one whole, never a part.
 *  - On any failure before the rename the old file is untouched and the
 *    temporary file is removed. A failure of the directory's fsync comes
 *    after the rename (the new file is in place but may not survive a power
 *    cut) and is reported; a file system that refuses a directory fsync
 *    (EINVAL) is not a failure.
 *  - Errors: -1, and atomic_file_last_error() (this thread's) reads
 *    "<who>: <path>: <strerror>" (e.g. "ckpt_write: /r/ckpt-1.trib: No
 *    space left on device"), or "<who>: <path>: fsync of its directory:
 *    <strerror>"; errno holds the failure's errno too. `who` names the
 *    caller's function (NULL: no "<who>: " prefix, for a caller that adds
 *    its own context); callers copy the text into their own module's error
 *    (docs/conventions.md "Errors").
 *  - A write failure is remembered and reported by atomic_file_commit, so a
 *    caller may write everything and check once.
 * Blocking file I/O; a struct atomic_file is caller-owned, one thread at a
 * time; several may write different files at once. */
#ifndef TRIB_COMMON_ATOMIC_FILE_H
#define TRIB_COMMON_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

struct atomic_file {
    FILE *f;
    char *path;      /* final path (owned) */
    char *tmp;       /* temporary path (owned) */
    int err;         /* first errno of a failed write, reported by commit */
};

/* Creates the temporary file. 0, or -1 (the directory is missing or
 * unwritable, path has no file name: "<who>: <path>: not a file name"). */
int atomic_file_open(struct atomic_file *a, const char *path, const char *who);
/* Appends n bytes (data may be NULL when n is 0). 0, or -1 once a write has
 * failed (the error is commit's to report). */
int atomic_file_write(struct atomic_file *a, const void *data, size_t n);
/* fflush, fsync, fclose, rename over the final path, fsync the directory.
 * 0, or -1 (the temporary file removed). Frees a's strings either way. */
int atomic_file_commit(struct atomic_file *a, const char *who);
/* Closes and removes the temporary file, frees a's strings. A no-op after
 * commit or on a zeroed struct. */
void atomic_file_abort(struct atomic_file *a);
/* open, write, commit: path's content becomes data[0..n). 0 or -1. */
int atomic_file_replace(const char *path, const void *data, size_t n, const char *who);

/* The message of this thread's last failure. */
const char *atomic_file_last_error(void);

#endif
