/* The shared test kit (kit.h). */
#define _GNU_SOURCE
#include "kit.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"

char kit_out[KIT_OUT_CAP], kit_err[KIT_OUT_CAP];

/* ---- scratch directories ------------------------------------------------- */

char *kit_must_scratch(char *dir, size_t cap, const char *prefix)
{
    int n = snprintf(dir, cap, "/tmp/%sXXXXXX", prefix);
    ck_assert_msg(n > 0 && (size_t)n < cap, "scratch directory name /tmp/%sXXXXXX longer than %zu", prefix, cap);
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp %s: %s", dir, strerror(errno));
    return dir;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP) chmod(p, 0700);
    return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int kit_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    /* A directory left without write or search permission by a test. */
    if (S_ISDIR(st.st_mode)) chmod(path, 0700);
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *kit_path(const char *dir, const char *name)
{
    static char buf[8][1024];
    static unsigned k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

/* ---- whole files ---------------------------------------------------------- */

/* Reads fd to its end, from offset 0 with pread when at is true, else with
 * read from where it stands. */
static char *read_all(int fd, bool at, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (;;) {
        if (cap - n - 1 == 0) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                free(s);
                errno = ENOMEM;
                return NULL;
            }
            s = t, cap *= 2;
        }
        ssize_t k = at ? pread(fd, s + n, cap - n - 1, (off_t)n) : read(fd, s + n, cap - n - 1);
        if (k == 0) break;
        if (k < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(s);
            errno = e;
            return NULL;
        }
        n += (size_t)k;
    }
    s[n] = '\0';
    if (len) *len = n;
    return s;
}

char *kit_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = read_all(fileno(f), false, len);
    int e = errno;
    fclose(f);
    errno = e;
    return s;
}

char *kit_must_read(const char *path, size_t *len)
{
    char *s = kit_read_file(path, len);
    ck_assert_msg(s != NULL, "reading %s: %s", path, strerror(errno));
    return s;
}

char *kit_must_read_in(const char *dir, const char *name, size_t *len) { return kit_must_read(kit_path(dir, name), len); }

char *kit_must_read_fd(int fd, size_t *len)
{
    char *s = read_all(fd, true, len);
    ck_assert_msg(s != NULL, "reading fd %d: %s", fd, strerror(errno));
    return s;
}

/* ---- running programs ----------------------------------------------------- */

int kit_run_into(const char *bin, const char *const *args, double timeout_s, char *out, char *err, size_t cap)
{
    size_t n = 0;
    while (args && args[n]) n++;
    const char **argv = calloc(n + 2, sizeof *argv);
    ck_assert_ptr_nonnull(argv);
    argv[0] = bin;
    for (size_t i = 0; i < n; i++) argv[i + 1] = args[i];
    int rc = -1;
    int started = proc_run(argv, timeout_s, out, out ? cap : 0, err, err ? cap : 0, &rc);
    int e = errno;
    free(argv);
    ck_assert_msg(started == 0, "starting %s: %s", bin, strerror(e));
    return rc;
}

int kit_run(const char *bin, const char *const *args, double timeout_s)
{
    return kit_run_into(bin, args, timeout_s, kit_out, kit_err, KIT_OUT_CAP);
}

/* ---- a runner's main ------------------------------------------------------- */

int kit_main(const char *suite, const struct kit_tcase *cases, int n)
{
    Suite *s = suite_create(suite);
    for (int i = 0; i < n; i++) {
        const struct kit_tcase *c = &cases[i];
        TCase *tc = tcase_create(c->name);
        if (c->timeout_s > 0) tcase_set_timeout(tc, c->timeout_s);
        if (c->setup || c->teardown) tcase_add_checked_fixture(tc, c->setup, c->teardown);
        for (int k = 0; k < KIT_MAX_TESTS && c->tests[k]; k++) tcase_add_test(tc, c->tests[k]);
        if (c->loop.test) tcase_add_loop_test(tc, c->loop.test, c->loop.start, c->loop.end);
        if (c->setup_once || c->teardown_once) tcase_add_unchecked_fixture(tc, c->setup_once, c->teardown_once);
        suite_add_tcase(s, tc);
    }
    return kit_run_suite(s);
}

int kit_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* ---- waiting -------------------------------------------------------------- */

double kit_now_s(void) { return trib_now_s(); }

void kit_nap_us(unsigned us)
{
    struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

bool kit_wait_until(bool (*cond)(void *arg), void *arg, double timeout_s)
{
    double end = kit_now_s() + timeout_s;
    unsigned us = 1000;
    while (!cond(arg)) {
        if (kit_now_s() > end) return cond(arg);
        kit_nap_us(us);
        if (us < 20000) us *= 2;
    }
    return true;
}

void kit_fail_wait(const char *what, double timeout_s, const char *file, int line)
{
    ck_abort_msg("%s:%d: waited %.0f s for %s", file, line, timeout_s, what);
    abort(); /* ck_abort_msg does not return; for the compiler */
}
