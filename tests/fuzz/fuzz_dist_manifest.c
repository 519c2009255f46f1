/* libFuzzer target: the distributed checkpoint's MANIFEST parser
 * (optim/dist_ckpt_manifest.c, through optim/dist_ckpt_internal.h). The
 * input is the MANIFEST's text. A parse that succeeds must hand
 * dist_ckpt_load only what the format allows (names a worker can have,
 * each shard's file exactly shard-G-WORKER.bin, numbers and counts in
 * range, no name twice): an input that breaks one aborts. A refusal must
 * say why. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/dist_ckpt_internal.h"

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_dist_manifest: accepted a manifest with %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dist_ckpt_manifest m;
    char err[256] = "";
    if (dist_ckpt_manifest_parse((const char *)data, size, &m, err, sizeof err) != 0) {
        require(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL, "an empty refusal");
        return 0;
    }
    require(m.generation >= 1 && m.generation <= DIST_CKPT_MAX_GENERATION, "a generation out of range");
    require(m.n_shards >= 0 && m.n_shards <= DIST_CKPT_MAX_SHARDS, "too many shards");
    require(m.n_mods >= 0 && m.n_mods <= DIST_CKPT_MAX_MODULES, "too many modules");
    require(m.n_optim >= 0 && m.n_optim <= DIST_CKPT_MAX_SHARDS, "too many optimizer owners");
    for (int i = 0; i < m.n_shards; i++) {
        char want[160];
        snprintf(want, sizeof want, "shard-%lld-%s.bin", (long long)m.generation, m.shard[i].worker);
        require(dist_ckpt_good_name(m.shard[i].worker, true), "a bad worker name");
        require(strcmp(m.shard[i].file, want) == 0 && !strchr(m.shard[i].file, '/'), "a shard file that is not its own");
        require(m.shard[i].size >= 0 && m.shard[i].size <= DIST_CKPT_MAX_SHARD_BYTES, "a shard size out of range");
        for (int j = 0; j < i; j++) require(strcmp(m.shard[i].worker, m.shard[j].worker) != 0, "two shards of a worker");
    }
    for (int i = 0; i < m.n_mods; i++) {
        require(dist_ckpt_good_name(m.mod[i].name, false) && dist_ckpt_good_name(m.mod[i].worker, true), "a bad module line");
        for (int j = 0; j < i; j++) require(strcmp(m.mod[i].name, m.mod[j].name) != 0, "a module twice");
    }
    for (int i = 0; i < m.n_optim; i++) require(dist_ckpt_good_name(m.optim[i], true), "a bad optimizer owner");
    return 0;
}
