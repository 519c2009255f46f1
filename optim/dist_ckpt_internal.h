/* The distributed checkpoint's MANIFEST parser (optim/dist_ckpt_manifest.c),
 * exposed for its fuzz target (tests/fuzz/fuzz_dist_manifest.c) and tests,
 * and the names and numbers of the format that dist_ckpt.c and
 * dist_ckpt_files.c share with it. Not installed: the format is dist_ckpt's
 * own (dist_ckpt.c writes it).
 *
 * MANIFEST (text, one item a line, fields separated by one space, every
 * line ends with '\n'):
 *   tributary-dist-ckpt 1
 *   generation G            1..DIST_CKPT_MAX_GENERATION, once, before any shard
 *   step S                  a signed 64-bit integer, at most once
 *   shard WORKER FILE SIZE HASH
 *                           FILE is exactly shard-G-WORKER.bin, SIZE
 *                           0..DIST_CKPT_MAX_SHARD_BYTES, HASH 16 hex digits;
 *                           one per worker, at most DIST_CKPT_MAX_SHARDS
 *   module NAME WORKER      one per name, at most DIST_CKPT_MAX_MODULES
 *   optimizer WORKER        at most DIST_CKPT_MAX_SHARDS
 * Names (workers and modules) are 1-63 printable characters without
 * spaces; a worker's name has no '/' either (it is part of a file name).
 * Anything else is refused, naming the line. */
#ifndef TRIB_OPTIM_DIST_CKPT_INTERNAL_H
#define TRIB_OPTIM_DIST_CKPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIST_CKPT_NAME_MAX 63
#define DIST_CKPT_MAX_SHARDS 64
#define DIST_CKPT_MAX_MODULES 256
#define DIST_CKPT_MAX_GENERATION 999999999999999999LL   /* 10^18 - 1: G + 1 never overflows */
#define DIST_CKPT_MAX_SHARD_BYTES (1LL << 40)           /* 1 TiB: the most an owner reads */
#define DIST_CKPT_MAX_MANIFEST_BYTES (1 << 20)          /* the largest valid one is ~50 KB */

struct dist_ckpt_manifest {
    int64_t generation, step;
    int n_shards, n_mods, n_optim;
    struct { char worker[64], file[128]; int64_t size; uint64_t hash; } shard[DIST_CKPT_MAX_SHARDS];
    struct { char name[64], worker[64]; } mod[DIST_CKPT_MAX_MODULES];
    char optim[DIST_CKPT_MAX_SHARDS][64];
};

/* Parses len bytes of MANIFEST text into *m. 0, or -1 with err (cap bytes)
 * saying why: "not a checkpoint manifest", "empty", "no generation line",
 * "line N: ..." (a malformed line is quoted, at most 60 characters, its
 * unprintable bytes as '?'). */
int dist_ckpt_manifest_parse(const char *text, size_t len, struct dist_ckpt_manifest *m, char *err, size_t cap);

/* A name the manifest can carry (see above); worker: no '/' either. */
bool dist_ckpt_good_name(const char *s, bool worker);

#define DIST_CKPT_MANIFEST "MANIFEST"                       /* its file name in a checkpoint directory */
#define DIST_CKPT_MANIFEST_HEADER "tributary-dist-ckpt 1"   /* its first line */

/* s[0..n) for an error message, into out (cap bytes): at most max bytes,
 * unprintable ones '?'. Returns out. */
const char *dist_ckpt_printable(const char *s, size_t n, size_t max, char *out, size_t cap);

enum { DIST_CKPT_NUM_OK = 0, DIST_CKPT_NUM_BAD = -1, DIST_CKPT_NUM_RANGE = -2 };

/* s[0..n) as a decimal integer in lo..hi into *out: digits, maybe a '-'
 * first, no '+', no leading zero. DIST_CKPT_NUM_OK, DIST_CKPT_NUM_BAD (not a
 * number) or DIST_CKPT_NUM_RANGE (a number outside lo..hi, or beyond 64
 * bits; *out unchanged). */
int dist_ckpt_parse_int(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out);

/* "shard-G-WORKER.bin" of this generation and worker (file of cap >= 128). */
void dist_ckpt_shard_file_name(int64_t gen, const char *worker, char *file, size_t cap);

#endif
