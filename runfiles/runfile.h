/* Run files are the run's own (issue 24, N12): the files a run directory
 * holds (config.json, metrics.csv/.jsonl, event files, policy.safetensors,
 * checkpoints/ and its ckpt-*.trib) are read and written only as what they
 * are meant to be: a symbolic link among them is never followed, and a
 * FIFO, a device or a socket is refused without blocking on it. The run
 * directory itself (the path the user names: --logdir, --resume DIR,
 * tributary-eval DIR) is taken as given, links in it included.
 *
 * The checks guard against a run directory prepared beforehand (copied,
 * unpacked, tampered with while no run uses it); a local user who can
 * write into it while the run goes on owns the run anyway.
 * Blocking file-system calls; any thread. */
#ifndef TRIB_RUNFILES_RUNFILE_H
#define TRIB_RUNFILES_RUNFILE_H

#include <stdbool.h>
#include <sys/types.h>

/* The kind of file mode m is, in words: "a symbolic link", "a FIFO",
 * "a directory", "a socket", "a character device", "a block device",
 * "a regular file". */
const char *runfile_kind(mode_t m);

/* 0 when path does not exist or is a regular file (lstat: a link is not
 * followed); -1 with runfiles_last_error() "<path>: is a symbolic link: a run's
 * files are never followed" or "<path>: is a FIFO, not a regular file"
 * (or "<path>: <the lstat's strerror>"). */
int runfile_check_file(const char *path);

/* The same for a directory of the run (checkpoints/): 0 when missing or a
 * directory; -1 with "<path>: is a symbolic link, not a directory: a run's
 * files are never followed" or "<path>: is a regular file, not a
 * directory". */
int runfile_check_dir(const char *path);

/* Opens path read-only without blocking on a FIFO (O_NONBLOCK, cleared
 * once the file is known to be regular) and, with nofollow, without
 * following a final symbolic link. Returns the descriptor of a regular
 * file, or -1 with errno set and why (cap bytes) holding the reason: the
 * open's strerror, "is a symbolic link: a run's files are never followed"
 * or "is a FIFO, not a regular file". */
int runfile_open_read(const char *path, bool nofollow, char *why, size_t cap);

#endif
