/* Distributed checkpoints: a set of RRef-owned modules (RemoteModules on
 * any workers) and a distributed optimizer's state, saved where they live.
 * Every owner writes its own shard (its modules' parameters and dropout
 * RNG, its local optimizer's state, its optimizer version) into DIR; the
 * caller then writes DIR/MANIFEST, which names every shard with its size
 * and FNV-1a 64 hash, every module with its owner, and the optimizer's
 * owners. Shards are named by a generation (shard-G-WORKER.bin) and the
 * manifest is written last and atomically (temporary file, fsync, rename),
 * so a save that fails or is interrupted leaves the previous checkpoint
 * whole; shards of older generations are removed after the new manifest
 * is in place. DIR must be a directory every owner can reach by the same
 * path (one machine, or a shared file system).
 *
 * Which directories (the trust rule). An owner's shard function can be
 * called by any member of the RPC world, so an owner reads and writes
 * shards only in a directory that is
 *  - one its own process is saving to or loading from right now
 *    (dist_ckpt_save/dist_ckpt_load in this process, for its own shards), or
 *  - a root it configured (dist_ckpt_add_root), or below one.
 * Every other directory is refused before the file system is touched.
 * In an allowed directory an owner touches only its own shard,
 * shard-G-NAME.bin (NAME its worker name): a plain file name, never a
 * path; and it saves only a generation G newer than the one the
 * directory's MANIFEST names, so the checkpoint there is never replaced
 * under its manifest. The directory is walked from "/" without following
 * links; a shard is read only if it is a regular file (not a link, FIFO or
 * device) whose size is the one the manifest states (at most 1 TiB),
 * checked before a byte is read, and written through a new temporary file,
 * never through a link. A refusal names only what the caller sent: never the contents, size
 * or hash of a file outside an allowed directory.
 *
 * The MANIFEST is checked whole before anything is done with it: its names
 * (workers and modules: 1-63 printable characters without spaces, a worker
 * without '/'), each shard's file name (exactly shard-G-WORKER.bin), and
 * its numbers (generation 1..10^18-1, sizes 0..1 TiB, at most 64 shards
 * and 256 modules). A save refuses what the manifest could not carry (a
 * worker named with a space, too many modules or workers), so what
 * dist_ckpt_save writes dist_ckpt_load reads. */
#ifndef TRIB_OPTIM_DIST_CKPT_H
#define TRIB_OPTIM_DIST_CKPT_H

#include <stdint.h>

#include "optim/dist_optim.h"
#include "rpc/remote_module.h"

/* Registers the owner-side function. Call in every process that owns
 * checkpointed modules or optimizer state, before rpc_init (after
 * dist_optim_init). Returns 0. */
int dist_ckpt_init(void);

/* Lets this process's owner side read and write its shards in dir and in
 * every directory below it (a checkpoint root: see "Which directories").
 * Call in every owner process whose shards another process saves or loads
 * (the process that calls dist_ckpt_save/load needs none for its own
 * shards). dir need not exist yet: it is resolved (realpath) at each use; a
 * relative dir is taken from the current directory now. At most 16 roots;
 * any time, thread-safe. 0, or -1 with rpc_last_error() (NULL or empty
 * dir, too many roots). */
int dist_ckpt_add_root(const char *dir);

/* A module in a checkpoint: a unique name (< 64 bytes, no whitespace) and
 * the module (on any worker). */
struct dist_ckpt_module {
    const char *name;
    struct remote_module *module;
};

/* Saves n modules and (opt non-NULL) opt's state on every owner, with the
 * caller's counter `step`, into dir (created if missing). Blocks; no
 * forward, backward or optimizer step may run on these modules meanwhile.
 * 0, or -1 with rpc_last_error() ("dist_ckpt_save: worker1: ...", a bad
 * name, a module given twice, a file system error naming the path, "worker
 * 'a b' cannot be named in a checkpoint ...", an existing DIR/MANIFEST that
 * is malformed or at the last generation). */
int dist_ckpt_save(const char *dir, int n, const struct dist_ckpt_module *mods, struct dist_optim *opt,
                   int64_t step);

/* Loads the checkpoint in dir into the same n modules (by name) and opt
 * (NULL: the optimizer state is not loaded), and its step into *step
 * (may be NULL). Every shard is checked first (present, size and hash as
 * the manifest says, the modules' parameter shapes) and only then applied,
 * so a refused checkpoint changes nothing; refusals name the problem:
 *   "dist_ckpt_load: DIR/MANIFEST: No such file or directory"
 *   "dist_ckpt_load: module 'm' is not in the checkpoint"
 *   "dist_ckpt_load: the checkpoint holds module 'm', which was not given"
 *   "dist_ckpt_load: module 'm' was saved on worker1, it is now on worker2"
 *   "dist_ckpt_load: worker1: shard shard-3-worker1.bin is missing"
 *   "dist_ckpt_load: worker1: shard shard-3-worker1.bin is not a regular file"
 *   "dist_ckpt_load: worker1: shard shard-3-worker1.bin does not match the
 *    manifest (N bytes; the manifest says M bytes)" (nothing read)
 *   "dist_ckpt_load: worker1: shard shard-3-worker1.bin does not match the
 *    manifest (N bytes, hash H; the manifest says N bytes, hash K)"
 *   "dist_ckpt_load: worker1: /d is not a checkpoint directory of worker1
 *    (see dist_ckpt_add_root)"
 *   "dist_ckpt_load: DIR/MANIFEST: line 2: generation 0 is out of range
 *    1..999999999999999999" (and every other manifest refusal by line)
 *   "dist_ckpt_load: worker1: module 'm' parameter 0: f32 [8,4] in the
 *    checkpoint, f32 [8,5] here"
 * Blocks, with the same rule as dist_ckpt_save. 0 or -1. */
int dist_ckpt_load(const char *dir, int n, const struct dist_ckpt_module *mods, struct dist_optim *opt,
                   int64_t *step);

#endif
