/* Checkpoint files: named byte sections (policy, optimizer state, counters,
 * RNG...) in one CRC-checked container, `ckpt-<step>.trib`, written
 * atomically (common/atomic_file.h, as every run file that replaces another
 * whole), the newest K kept. Also mkdir -p for the run files.
 *
 * Format, version 1, integers little-endian:
 *   0   "TRIBCKPT"        magic, 8 bytes
 *   8   u32 version       1
 *   12  u32 n_sections    at most CKPT_MAX_SECTIONS
 *   16  u64 file_size     the whole file, trailer included
 *   24  i64 step
 *   32  n_sections times: u32 name_len (1..CKPT_MAX_NAME), name bytes (no NUL),
 *                         u64 size, size bytes
 *   end u32 crc32c of every byte before it
 * Every call is blocking file I/O; any thread, one writer per directory. */
#ifndef TRIB_RUNFILES_CKPT_H
#define TRIB_RUNFILES_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CKPT_VERSION 1
#define CKPT_MAX_SECTIONS 4096
#define CKPT_MAX_NAME 255

/* ---- directories ------------------------------------------------------------ */

/* mkdir -p: creates dir and its missing parents (mode 0777 & ~umask).
 * Returns 0 (also when it exists), or -1 with runfiles_last_error
 * ("<who>: cannot create directory <dir>: <strerror>"). */
int ckpt_mkdirs(const char *dir, const char *who);

/* ---- checkpoints ----------------------------------------------------------- */

/* One named section. In a loaded struct ckpt, name and data point into the
 * checkpoint's own memory (valid until ckpt_free). */
struct ckpt_section {
    const char *name;
    const void *data;
    size_t size;
};

/* A loaded, validated checkpoint. Read-only for the caller. */
struct ckpt {
    char *path;                     /* the file it came from */
    int64_t step;
    int n_sections;
    struct ckpt_section *sections;  /* in file order */
};

/* Writes dir/ckpt-<step, 12 digits>.trib atomically (creating dir if
 * missing), then deletes all but the `keep` checkpoints of highest step in
 * dir, never the one just written (keep <= 0: delete none). The sections are
 * borrowed and written in order. Returns 0, or -1 with runfiles_last_error for a
 * negative step, a bad section (empty or over-long name, duplicate name,
 * NULL data with size > 0, too many), a dir that is a symbolic link or no
 * directory ("ckpt_write: <dir>: is a symbolic link, not a directory: a
 * run's files are never followed") or a write failure (disk full,
 * unwritable dir), leaving older checkpoints as they were. A failed
 * deletion of an old checkpoint is not an error. */
int ckpt_write(const char *dir, int64_t step, const struct ckpt_section *sections, int n, int keep);

/* Loads and validates one checkpoint file: length fields against the file
 * size before any allocation beyond the file itself, magic, version, CRC,
 * section bounds, duplicate names. Returns a new struct ckpt (ckpt_free), or
 * NULL with runfiles_last_error "ckpt_load: <path>: <why>", where why is one of:
 *   "truncated (<n> of <m> bytes)"  (m unknown: "truncated (<n> bytes)")
 *   "bad magic (not a tributary checkpoint)"
 *   "unknown format version <v> (this build reads 1)"
 *   "bad CRC (stored 0x..., computed 0x...)"
 *   "bad header: negative step <n>"
 *   "<n> bytes after the end recorded in its header"
 *   "section <i>: ..." (bad name length, past the end, duplicate name)
 *   "is a FIFO, not a regular file" (a FIFO, a device: never waited on)
 *   or the strerror of open/read. path may be a symbolic link (a file the
 *   user named); ckpt_load_latest follows none. */
struct ckpt *ckpt_load(const char *path);

/* Loads the checkpoint of highest step in dir that validates (only names
 * ckpt-<digits>.trib count). Returns 1 with *out set; 0 with *out NULL when
 * dir holds no checkpoint at all (or does not exist: a fresh run); -1 with
 * *out NULL and runfiles_last_error when every checkpoint was refused ("ckpt_load_
 * latest: <dir>: no checkpoint validates: <file>: <why>; ...") or dir cannot
 * be listed, or when dir, or a ckpt-*.trib in it, is a symbolic link or
 * not what it should be (runfiles/runfile.h: "ckpt_load_latest: <path>: is a
 * symbolic link: a run's files are never followed"; such a file is not
 * skipped as a damaged one is). warning (cap bytes, may be NULL when cap is 0) receives "" or,
 * when newer files were refused, "refused <path>: <why>; ...; loaded
 * <path>", for the caller to print. */
int ckpt_load_latest(const char *dir, struct ckpt **out, char *warning, size_t cap);

/* The section named name, or NULL with runfiles_last_error
 * "ckpt: <path>: no section \"<name>\" (has: a, b, c)". *size gets its size
 * (size may be NULL). The memory belongs to c. */
const void *ckpt_get(const struct ckpt *c, const char *name, size_t *size);

/* Frees c and every section. Accepts NULL. */
void ckpt_free(struct ckpt *c);

#endif
