/* FNV-1a 64: the checksum of saved state (optimizer state, checkpoint
 * shards). Header-only, below every layer. */
#ifndef TRIB_COMMON_HASH_H
#define TRIB_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t trib_fnv1a64(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
