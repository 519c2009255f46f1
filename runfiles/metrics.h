/* A run's metrics log: metrics.csv and metrics.jsonl side by side in the run
 * directory, one row per call, columns chosen by the caller (env_steps,
 * wall_s, return_mean... scripts/plot reads those three), and config.json
 * for the run's settings. Numbers are printed as integers when they are
 * ones (up to 2^53), else with the shortest %.Ng (N <= 17) that reads back
 * to the same double; NaN means "not applicable":
 * an empty CSV cell and a JSON null. Infinities are "inf"/"-inf" in CSV and
 * 1e999/-1e999 in JSON (valid JSON that parsers read as infinity).
 * Blocking file I/O. A log belongs to one thread at a time. */
#ifndef TRIB_RUNFILES_METRICS_H
#define TRIB_RUNFILES_METRICS_H

#include <stdbool.h>

#include <cjson/cJSON.h>

struct metrics_log;

/* Opens dir/metrics.csv and dir/metrics.jsonl (creating dir if missing,
 * mkdir -p) for ncols columns named cols (copied; each non-empty, unique,
 * without '"', ',', or a line break so the CSV needs no quoting). resume
 * false truncates both files and writes the CSV header; resume true appends
 * to existing files after checking the CSV header is exactly these columns
 * (a missing or empty metrics.csv is started afresh). Returns the log
 * (metrics_close), or NULL with runfiles_last_error "metrics_open: ..." (bad
 * column name, "<path>: has columns a,b, not c,d", "<path>: <strerror>"). */
struct metrics_log *metrics_open(const char *dir, const char *const *cols, int ncols, bool resume);

/* Appends one row: values[i] for column i (ncols of them; NaN for "not
 * applicable") to both files and flushes them, so a crash loses nothing
 * and readers (scripts/plot) see whole rows. No allocation. Returns 0, or
 * -1 with runfiles_last_error "metrics_write: <path>: <strerror>" (disk full...);
 * a row may then be partly written, so every later call fails too. */
int metrics_write(struct metrics_log *m, const double *values);

/* Closes both files and frees m. Accepts NULL. */
void metrics_close(struct metrics_log *m);

/* Writes dir/config.json (creating dir if missing) from a cJSON object
 * (borrowed), pretty-printed, atomically (common/atomic_file.h). Returns
 * 0, or -1 with runfiles_last_error "metrics_write_config: ...". */
int metrics_write_config(const char *dir, const cJSON *config);

/* The same from n key/value string pairs ({"key": "value", ...} in order):
 * the simple case of a program's parsed flags. Duplicate keys are an
 * error. */
int metrics_write_config_kv(const char *dir, const char *const *keys, const char *const *values, int n);

/* Whether dir already holds a run (config.json, metrics.csv/.jsonl,
 * TensorBoard event files, policy.safetensors, policy_best.safetensors or
 * checkpoints/ckpt-*; a
 * "checkpoints" that is a symbolic link or no directory counts as one of
 * them, and is not followed): 1 (*what names the first such file, e.g.
 * "config.json"), 0 when it does not or does not exist, -1 with
 * runfiles_last_error() when it cannot be read. */
int metrics_dir_holds_run(const char *dir, char *what, size_t cap);

/* Removes those files of a run from dir (never anything else; a link is
 * removed, not what it leads to), so a new run can start there
 * (--overwrite). 0, or -1 with runfiles_last_error() naming the file that could
 * not be removed. */
int metrics_dir_clear(const char *dir);

/* Checks the run files of dir (runfiles/runfile.h) before a resume or an
 * evaluation reads them: each of those files a regular file, checkpoints/
 * a directory, none a symbolic link. 0, or -1 with runfiles_last_error()
 * naming the first that is not ("DIR/config.json: is a FIFO, not a regular
 * file", "DIR/checkpoints: is a symbolic link, not a directory: a run's
 * files are never followed"). */
int metrics_dir_check(const char *dir);

#endif
