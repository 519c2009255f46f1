/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78): the checksum of
 * TensorBoard's record framing (tfevents.c) and of checkpoint files
 * (ckpt.c). A byte-wise table; fast enough for files written a few times a
 * minute, and no Debian package is needed for twenty lines. */
#ifndef TRIB_RUNFILES_CRC32C_H
#define TRIB_RUNFILES_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C over n more bytes: crc32c_update(0, ...) starts one,
 * and crc32c_update(crc32c_update(0, a, na), b, nb) == crc32c(a ++ b).
 * Pure; any thread. */
uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);

/* CRC-32C of n bytes (crc32c("123456789") == 0xe3069283). */
static inline uint32_t crc32c(const void *data, size_t n) { return crc32c_update(0, data, n); }

#endif
