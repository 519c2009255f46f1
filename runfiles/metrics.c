/* metrics.csv + metrics.jsonl rows and config.json (contracts in metrics.h).
 * Column names are checked and their JSON spellings (cJSON-escaped) made at
 * open, so a row is formatted straight into the two FILE buffers. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/check.h"
#include "runfiles/ckpt.h"
#include "runfiles/metrics.h"
#include "runfiles/runfile.h"
#include "runfiles/runfiles.h"

struct metrics_log {
    FILE *csv, *jsonl;
    char *csv_path, *jsonl_path;
    int ncols;
    char **json_keys;       /* "\"name\":", cJSON-escaped */
    char error[256];        /* set after the first failed write */
};

/* A finite v as an integer when it is one within +-2^53 (env steps stay
 * "1000", not "1e+03"), else the shortest %.Ng (N <= 17) that strtod reads
 * back as v. */
static void format_double(char *buf, size_t cap, double v)
{
    if (v == floor(v) && fabs(v) <= 9007199254740992.0) {
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static int check_cols(const char *const *cols, int ncols)
{
    if (ncols <= 0) return runfiles_set_error("metrics_open: no columns");
    for (int i = 0; i < ncols; i++) {
        if (!cols[i] || !*cols[i]) return runfiles_set_error("metrics_open: column %d has no name", i);
        if (strpbrk(cols[i], "\",\r\n"))
            return runfiles_set_error("metrics_open: column \"%s\" holds '\"', ',' or a line break", cols[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(cols[i], cols[j]) == 0)
                return runfiles_set_error("metrics_open: duplicate column \"%s\"", cols[i]);
    }
    return 0;
}

/* cols joined with commas (malloc'd). */
static char *join_cols(const char *const *cols, int ncols)
{
    size_t len = 1;
    for (int i = 0; i < ncols; i++) len += strlen(cols[i]) + 1;
    char *s = trib_xmalloc(len), *p = s;
    for (int i = 0; i < ncols; i++) p += sprintf(p, "%s%s", i ? "," : "", cols[i]);
    return s;
}

/* With resume, whether metrics.csv exists with content (*append) and its
 * header line is `header`. */
static int check_resume(const char *path, const char *header, bool *append)
{
    *append = false;
    char why[160];
    int fd = runfile_open_read(path, true, why, sizeof why);
    if (fd < 0) return errno == ENOENT ? 0 : runfiles_set_error("metrics_open: %s: %s", path, why);
    FILE *f = fdopen(fd, "r");
    CHECK_ALLOC(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);
    fclose(f);
    int rc = 0;
    if (n > 0) {
        *append = true;
        line[strcspn(line, "\r\n")] = '\0';
        if (strcmp(line, header) != 0)
            rc = runfiles_set_error("metrics_open: %s: has columns %.120s, not %.120s", path, line, header);
    }
    free(line);
    return rc;
}

/* A metrics file opened for writing (append, or truncated): never through
 * a symbolic link, never a FIFO or a device. NULL with runfiles_last_error(). */
static FILE *open_log(const char *path, bool append)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0666);
    struct stat st = { 0 };
    if (fd < 0) {
        int e = errno;
        /* a link (ELOOP), a FIFO without a reader (ENXIO), ...: said as what it is */
        if (runfile_check_file(path) != 0) runfiles_set_error("metrics_open: %s", runfiles_last_error());
        else runfiles_set_error("metrics_open: %s: %s", path, strerror(e));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        runfiles_set_error("metrics_open: %s: is %s, not a regular file", path, runfile_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, append ? "a" : "w");
    CHECK_ALLOC(f);
    return f;
}

struct metrics_log *metrics_open(const char *dir, const char *const *cols, int ncols, bool resume)
{
    if (check_cols(cols, ncols) != 0 || ckpt_mkdirs(dir, "metrics_open") != 0) return NULL;
    struct metrics_log *m = trib_xcalloc(1, sizeof *m);
    CHECK(asprintf(&m->csv_path, "%s/metrics.csv", dir) >= 0);
    CHECK(asprintf(&m->jsonl_path, "%s/metrics.jsonl", dir) >= 0);
    char *header = join_cols(cols, ncols);
    bool append = false;
    if (resume && check_resume(m->csv_path, header, &append) != 0) goto fail;
    if (!(m->csv = open_log(m->csv_path, append)) || !(m->jsonl = open_log(m->jsonl_path, append))) goto fail;
    if (!append && (fprintf(m->csv, "%s\n", header) < 0 || fflush(m->csv) != 0)) {
        runfiles_set_error("metrics_open: %s: %s", m->csv_path, strerror(errno));
        goto fail;
    }
    m->ncols = ncols;
    m->json_keys = trib_xcalloc((size_t)ncols, sizeof *m->json_keys);
    for (int i = 0; i < ncols; i++) {
        cJSON *s = cJSON_CreateString(cols[i]);
        CHECK_ALLOC(s);
        char *q = cJSON_PrintUnformatted(s);
        CHECK_ALLOC(q);
        CHECK(asprintf(&m->json_keys[i], "%s:", q) >= 0);
        cJSON_free(q);
        cJSON_Delete(s);
    }
    free(header);
    return m;
fail:
    free(header);
    metrics_close(m);
    return NULL;
}

/* One row into both files; returns the failing file's path, or NULL. */
static const char *write_row(struct metrics_log *m, const double *v)
{
    char num[32];
    fputc('{', m->jsonl);
    for (int i = 0; i < m->ncols; i++) {
        const char *csv = num, *json = num;
        if (isnan(v[i])) {
            csv = "";
            json = "null";
        } else if (isinf(v[i])) {
            csv = v[i] > 0 ? "inf" : "-inf";
            json = v[i] > 0 ? "1e999" : "-1e999";
        } else {
            format_double(num, sizeof num, v[i]);
        }
        fprintf(m->csv, "%s%s", i ? "," : "", csv);
        fprintf(m->jsonl, "%s%s%s", i ? "," : "", m->json_keys[i], json);
    }
    fputc('\n', m->csv);
    fputs("}\n", m->jsonl);
    if (fflush(m->csv) != 0 || ferror(m->csv)) return m->csv_path;
    if (fflush(m->jsonl) != 0 || ferror(m->jsonl)) return m->jsonl_path;
    return NULL;
}

int metrics_write(struct metrics_log *m, const double *values)
{
    if (m->error[0]) return runfiles_set_error("metrics_write: %s", m->error);
    errno = 0;
    const char *bad = write_row(m, values);
    if (bad) {
        snprintf(m->error, sizeof m->error, "%s: %s", bad, strerror(errno ? errno : EIO));
        return runfiles_set_error("metrics_write: %s", m->error);
    }
    return 0;
}

void metrics_close(struct metrics_log *m)
{
    if (!m) return;
    if (m->csv) fclose(m->csv);
    if (m->jsonl) fclose(m->jsonl);
    for (int i = 0; m->json_keys && i < m->ncols; i++) free(m->json_keys[i]);
    free(m->json_keys);
    free(m->csv_path);
    free(m->jsonl_path);
    free(m);
}

int metrics_write_config(const char *dir, const cJSON *config)
{
    if (!cJSON_IsObject(config)) return runfiles_set_error("metrics_write_config: config is not a JSON object");
    if (ckpt_mkdirs(dir, "metrics_write_config") != 0) return -1;
    char *text = cJSON_Print(config);
    CHECK_ALLOC(text);
    char *path = NULL;
    CHECK(asprintf(&path, "%s/config.json", dir) >= 0);
    struct atomic_file a;
    int rc = atomic_file_open(&a, path, "metrics_write_config");
    if (rc == 0) {
        atomic_file_write(&a, text, strlen(text));
        atomic_file_write(&a, "\n", 1);
        rc = atomic_file_commit(&a, "metrics_write_config");
    }
    if (rc != 0) runfiles_set_error("%s", atomic_file_last_error());
    free(path);
    cJSON_free(text);
    return rc;
}

int metrics_write_config_kv(const char *dir, const char *const *keys, const char *const *values, int n)
{
    cJSON *o = cJSON_CreateObject();
    CHECK_ALLOC(o);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!keys[i] || !values[i])
            rc = runfiles_set_error("metrics_write_config_kv: entry %d has a NULL key or value", i);
        else if (cJSON_GetObjectItemCaseSensitive(o, keys[i]))
            rc = runfiles_set_error("metrics_write_config_kv: duplicate key \"%s\"", keys[i]);
        else
            CHECK(cJSON_AddStringToObject(o, keys[i], values[i]) != NULL);
    }
    if (rc == 0) rc = metrics_write_config(dir, o);
    cJSON_Delete(o);
    return rc;
}

/* The files a run leaves at the top of its directory (README "What a run
 * leaves"); checkpoints/ckpt-* are looked for separately. */
static bool run_file(const char *name)
{
    static const char *const exact[] = { "config.json", "metrics.csv", "metrics.jsonl", "policy.safetensors",
                                         "policy_best.safetensors", NULL };
    for (int i = 0; exact[i]; i++)
        if (strcmp(name, exact[i]) == 0) return true;
    return strncmp(name, "events.out.tfevents.", 20) == 0;
}

/* Calls fn(path) for each run file of dir (top level, then checkpoints/ckpt-*)
 * until it returns non-zero; returns that, 0, or -1 when dir cannot be read. */
static int each_run_file(const char *dir, int (*fn)(const char *path, const char *name, void *u), void *u)
{
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : runfiles_set_error("%s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char path[4096 + 512];
    while (rc == 0 && (e = readdir(d)))
        if (run_file(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            rc = fn(path, e->d_name, u);
        }
    closedir(d);
    if (rc != 0) return rc;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    struct stat st;
    if (lstat(sub, &st) != 0) return errno == ENOENT ? 0 : runfiles_set_error("%s: %s", sub, strerror(errno));
    /* a link (or a file) in checkpoints' place is itself the run's entry:
     * what it leads to is not looked into (nor, by --overwrite, deleted) */
    if (!S_ISDIR(st.st_mode)) return fn(sub, "checkpoints", u);
    if (!(d = opendir(sub))) return runfiles_set_error("%s: %s", sub, strerror(errno));
    while (rc == 0 && (e = readdir(d)))
        if (strncmp(e->d_name, "ckpt-", 5) == 0) {
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
            char name[300];
            snprintf(name, sizeof name, "checkpoints/%s", e->d_name);
            rc = fn(path, name, u);
        }
    closedir(d);
    return rc;
}

struct found { char *what; size_t cap; };

static int note_found(const char *path, const char *name, void *u)
{
    (void)path;
    struct found *f = u;
    snprintf(f->what, f->cap, "%s", name);
    return 1;
}

int metrics_dir_holds_run(const char *dir, char *what, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, F_OK) == 0) {   /* named first: it is what --resume reads */
        snprintf(what, cap, "config.json");
        return 1;
    }
    struct found f = { what, cap };
    return each_run_file(dir, note_found, &f);
}

static int remove_file(const char *path, const char *name, void *u)
{
    (void)name;
    (void)u;
    if (unlink(path) != 0 && errno != ENOENT) return runfiles_set_error("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

int metrics_dir_clear(const char *dir) { return each_run_file(dir, remove_file, NULL); }

static int check_file(const char *path, const char *name, void *u)
{
    (void)u;
    return strcmp(name, "checkpoints") == 0 ? runfile_check_dir(path) : runfile_check_file(path);
}

int metrics_dir_check(const char *dir) { return each_run_file(dir, check_file, NULL) == 0 ? 0 : -1; }
