/* runfiles/: the files a run leaves behind, below rl/ (runfiles/README.md).
 * This header holds what every file here shares: the folder's last-error
 * text. Its parts, each with its contract in its header:
 *   runfile.h       a run's files opened as what they are (no link followed,
 *                   no FIFO waited on)
 *   crc32c.h        CRC-32C (checkpoints, TensorBoard records)
 *   ckpt.h          checkpoints: ckpt-<step>.trib, CRC-checked sections
 *   safetensors.h   .safetensors files, written and read with every check
 *   policy_file.h   the policy's architecture, its nets and its file
 *                   (policy.safetensors)
 *   tfevents.h      TensorBoard event files (tfevents.proto)
 *   metrics.h       metrics.csv / metrics.jsonl, config.json, the run
 *                   directory as a whole */
#ifndef TRIB_RUNFILES_RUNFILES_H
#define TRIB_RUNFILES_RUNFILES_H

/* Message of the last recoverable error of a runfiles/ call on this thread
 * ("" if none). Every function here that returns -1/NULL sets it. */
const char *runfiles_last_error(void);

/* Sets this thread's runfiles error text (printf-style); returns -1. */
int runfiles_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
