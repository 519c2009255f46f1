/* The framing the fuzz targets read their input in: frames, each a
 * little-endian u16 length and that many bytes (the last frame takes what
 * is left when the input ends early). Shared by the targets and the seed
 * writer, so that seeds and inputs mean the same. */
#ifndef TRIB_TESTS_FUZZ_FRAMES_H
#define TRIB_TESTS_FUZZ_FRAMES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

/* Reads up to max frames from *data (advancing it): the first `count`
 * frames, or every frame to the end when count < 0. Returns how many. */
static inline int fuzz_frames(const uint8_t **data, size_t *size, int count, zmq_msg_t *out, int max)
{
    int n = 0;
    while (*size > 0 && n < max && (count < 0 || n < count)) {
        size_t len = *size >= 2 ? (size_t)((*data)[0] | (*data)[1] << 8) : 0;
        size_t skip = *size >= 2 ? 2 : *size;
        *data += skip;
        *size -= skip;
        if (len > *size) len = *size;
        zmq_msg_init_size(&out[n], len);
        if (len) memcpy(zmq_msg_data(&out[n]), *data, len);
        *data += len;
        *size -= len;
        n++;
    }
    return n;
}

static inline void fuzz_close(zmq_msg_t *f, int n)
{
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

#endif
