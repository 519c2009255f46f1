/* libFuzzer target: the checkpoint reader (runfiles/ckpt.c) and what --resume
 * reads from a checkpoint (its config and its counters). The first input
 * byte is a mode: odd, the rest is the file with its header's size and its
 * CRC trailer made right (so the fuzzer gets past the CRC into the
 * sections); even, the rest is the file as it is. */
#define _GNU_SOURCE
#include <string.h>

#include "agent/run_stats.h"
#include "fuzz_file.h"
#include "rl/rl.h"
#include "runfiles/ckpt.h"
#include "runfiles/crc32c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct run_stats *stats;
    if (!stats) {
        struct rl_config cfg;
        rl_config_preset(&cfg, "ppo-fast");
        stats = run_stats_new(&cfg, 0);
    }
    if (size == 0) return 0;
    bool fix = data[0] & 1;
    data++;
    size--;
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (fix && size >= 36) {
        uint64_t n = size;
        memcpy(buf + 16, &n, 8);
        uint32_t crc = crc32c(buf, size - 4);
        memcpy(buf + size - 4, &crc, 4);
    }
    struct ckpt *c = ckpt_load(fuzz_file(buf, size));
    free(buf);
    if (!c) return 0;
    size_t len = 0;
    const char *text = ckpt_get(c, "config", &len);
    struct rl_config cfg;
    if (text) rl_config_from_json(text, len, &cfg);
    const void *counters = ckpt_get(c, "counters", &len);
    if (counters && run_stats_load(stats, counters, len) == 0) {
        /* what a resumed run then does with them */
        struct rl_report r = { .steps = 1, .episodes = 1, .n_returns = 1, .returns = { 1 }, .lengths = { 1 } };
        run_stats_report(stats, &r);
        run_stats_update(stats, 0, NULL);
        run_stats_solved(stats);
    }
    for (int i = 0; i < c->n_sections; i++)
        if (c->sections[i].size) (void)((volatile const uint8_t *)c->sections[i].data)[c->sections[i].size - 1];
    ckpt_free(c);
    return 0;
}
