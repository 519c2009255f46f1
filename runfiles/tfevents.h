/* TensorBoard event files: scalars a run logs (return, loss, steps/s...)
 * written as `events.out.tfevents.<unix time>.<hostname>`, which
 * `tensorboard --logdir` reads. Each record is u64 length, u32 masked
 * CRC-32C of those 8 bytes, the serialized Event proto, u32 masked CRC-32C
 * of it (all little-endian); the first Event carries file_version
 * "brain.Event:2", the others Summary{value{tag, simple_value}}. The protos
 * (runfiles/tfevents.proto, the fields used of TensorBoard's event.proto and
 * summary.proto) are encoded by protobuf-c.
 * Blocking file I/O. A writer belongs to one thread at a time. */
#ifndef TRIB_RUNFILES_TFEVENTS_H
#define TRIB_RUNFILES_TFEVENTS_H

#include <stdint.h>

#define TFEVENTS_FILE_VERSION "brain.Event:2"

struct tfevents_writer;

/* Creates dir if missing (mkdir -p) and a new event file in it (never
 * overwriting one: a second writer opened in the same second and host gets
 * a ".1", ".2"... suffix), and writes the file_version event. Returns the writer
 * (tfevents_close), or NULL with runfiles_last_error "tfevents_open: <path>:
 * <strerror>". */
struct tfevents_writer *tfevents_open(const char *dir);

/* The event file's path (owned by w). */
const char *tfevents_path(const struct tfevents_writer *w);

/* Appends one Event{wall_time: now (CLOCK_REALTIME), step,
 * summary{value{tag, simple_value: value}}} and flushes it to the kernel, so
 * TensorBoard sees it at once and a crash loses nothing written before.
 * Reuses w's buffer: no allocation once the largest tag was seen. Returns 0,
 * or -1 with runfiles_last_error "tfevents_add_scalar: <path>: <strerror>" (disk
 * full...); after a failure the file may end in a partial record, so every
 * later call fails with the same message. */
int tfevents_add_scalar(struct tfevents_writer *w, const char *tag, float value, int64_t step);

/* Closes the file and frees w. Accepts NULL. */
void tfevents_close(struct tfevents_writer *w);

/* TensorBoard's CRC mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tfevents_mask_crc(uint32_t crc);

/* ---- reading back (tests, tools) ------------------------------------------ */

struct tfevents_scalar {
    double wall_time;
    int64_t step;
    char *tag;           /* owned by the array */
    float value;
};

/* Reads every record of path, checking each length against the rest of the
 * file and both CRCs, decodes the Events, requires the first to be a
 * file_version "brain.Event:*", and returns the simple_value scalars in file
 * order (other events and values are skipped). On success *out is a new
 * array of *n (tfevents_scalars_free) and returns 0. Returns -1 with
 * runfiles_last_error "tfevents_read_scalars: <path>: record <i> at byte <off>:
 * <problem>" (truncated header, length CRC mismatch, length past the end,
 * data CRC mismatch, not an Event proto) or "<path>: <strerror>". A file
 * whose writer is still running can end in a partial record: that is an
 * error here (TensorBoard waits for the rest). */
int tfevents_read_scalars(const char *path, struct tfevents_scalar **out, int *n);

/* Frees an array from tfevents_read_scalars. Accepts NULL. */
void tfevents_scalars_free(struct tfevents_scalar *v, int n);

#endif
