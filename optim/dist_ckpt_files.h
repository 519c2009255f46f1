/* Where an owner of a distributed checkpoint may read and write
 * (optim/dist_ckpt_files.c; the rule: dist_ckpt.h "Which directories").
 * Not installed: dist_ckpt.c's own. Every function may be called from any
 * thread (the roots and active directories are under one mutex). */
#ifndef TRIB_OPTIM_DIST_CKPT_FILES_H
#define TRIB_OPTIM_DIST_CKPT_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dist_ckpt_manifest;
struct rpc_request;

/* dir (a realpath) is one this process is saving to or loading from now,
 * until dist_ckpt_active_remove(dir): its owners may use it. */
void dist_ckpt_active_add(const char *dir);
void dist_ckpt_active_remove(const char *dir);

/* dir[0..n) is an absolute path without empty, "." or ".." components (nor
 * a trailing '/'). */
bool dist_ckpt_clean_absolute(const char *dir, size_t n);

/* dir (clean, absolute) is one this process is saving to or loading from,
 * or is, or is below, a root (resolved now). */
bool dist_ckpt_dir_allowed(const char *dir);

/* Opens dir (clean, absolute) one component at a time from "/", following
 * no link. The directory's fd (the caller closes it), or -1 with errno
 * (ELOOP: a link on the way). */
int dist_ckpt_open_dir_nofollow(const char *dir);

/* file is exactly "shard-G-ME.bin" with G in 1..DIST_CKPT_MAX_GENERATION. */
bool dist_ckpt_own_shard_name(const char *file, const char *me);

/* Reads the shard `file` in directory dfd: a regular file (no link, no
 * FIFO, no device) of exactly want bytes, or nothing is read. The buffer
 * (the caller frees it), or NULL after rpc_request_fail. */
uint8_t *dist_ckpt_read_shard(struct rpc_request *req, int dfd, const char *file, int64_t want);

/* Reads and parses the manifest `name` (relative to dfd, or a path): a
 * regular file (no link, no FIFO) of at most DIST_CKPT_MAX_MANIFEST_BYTES.
 * 0, or -1 with err (cap bytes) saying why (*missing: it does not exist). */
int dist_ckpt_manifest_at(int dfd, const char *name, struct dist_ckpt_manifest *m, bool *missing, char *err, size_t cap);

/* A save of shard `file` (its name checked) in dfd may not replace a shard
 * of the checkpoint there: its generation must be newer than the MANIFEST's
 * (none: any). 0 or -1 after rpc_request_fail. */
int dist_ckpt_newer_than_checkpoint(struct rpc_request *req, int dfd, const char *file);

#endif
