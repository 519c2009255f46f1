/* The shared test kit: what every Check runner under tests/ needs and
 * used to write again for itself. Scratch directories made and removed,
 * a whole file or fd read into memory, a program run to its end with its
 * stdout and stderr captured (common/proc's proc_run, which also forks,
 * spawns and reaps for the multi-process harnesses), and a wait on a
 * condition with a deadline (tests wait on conditions, never on sleeps).
 * trib_add_test links libtrib_test_kit into every runner and puts this
 * folder on the include path: #include "kit.h".
 *
 * A runner's main is KIT_MAIN's table of its TCases, not its own
 * suite-building code.
 *
 * Functions named kit_must_* fail the running test (ck_abort_msg, naming
 * the path or program and errno) instead of returning an error; the others
 * return NULL or -1 with errno set, for tests that assert on the failure
 * or programs that are not Check runners. Single-threaded, like Check's
 * test bodies. */
#ifndef TRIB_TESTS_KIT_H
#define TRIB_TESTS_KIT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- scratch directories ------------------------------------------------- */

/* Makes a fresh directory /tmp/<prefix>XXXXXX (mkdtemp) into dir (cap
 * bytes) and returns dir; fails the test if it cannot. */
char *kit_must_scratch(char *dir, size_t cap, const char *prefix);

/* Removes path and everything below it, following no link; a missing path
 * is not an error. 0, or -1 with errno set (what could be removed is). */
int kit_rm_rf(const char *path);

/* dir/name in one of 8 rotating buffers (good until 8 more calls), cut at
 * 1023 bytes. */
const char *kit_path(const char *dir, const char *name);

/* ---- whole files ---------------------------------------------------------- */

/* The whole file path, NUL-terminated (binary content kept; the caller
 * frees), *len its length (len may be NULL). NULL with errno set when it
 * cannot be opened or read. */
char *kit_read_file(const char *path, size_t *len);
/* The same, failing the test naming path when it cannot be read. */
char *kit_must_read(const char *path, size_t *len);
/* kit_must_read of dir/name. */
char *kit_must_read_in(const char *dir, const char *name, size_t *len);

/* Everything written to fd from offset 0 (pread: the offset is left as it
 * is), NUL-terminated, the caller frees, *len its length (may be NULL);
 * fails the test when it cannot be read. For a child's captured output
 * (struct proc's out_fd and err_fd). */
char *kit_must_read_fd(int fd, size_t *len);

/* ---- running programs ----------------------------------------------------- */

#define KIT_OUT_CAP (1 << 17)
/* The stdout and stderr of the last kit_run (NUL-terminated, cut at
 * KIT_OUT_CAP - 1 bytes). */
extern char kit_out[KIT_OUT_CAP], kit_err[KIT_OUT_CAP];

/* Runs bin with args (NULL-terminated, without argv[0]; or NULL) in a
 * group of its own to its end, or SIGKILLs it past timeout_s (< 0: no
 * limit); its stdout and stderr in kit_out and kit_err. Returns its status
 * as proc_wait does (the exit code, 128 + a signal, -1 when killed past
 * the timeout). Fails the test if it cannot start. */
int kit_run(const char *bin, const char *const *args, double timeout_s);
/* The same with the output in out and err (cap bytes each; either may be
 * NULL). */
int kit_run_into(const char *bin, const char *const *args, double timeout_s, char *out, char *err, size_t cap);

/* ---- a runner's main ------------------------------------------------------- */

#define KIT_MAX_TESTS 64
/* One TCase: its name, its timeout in seconds (0: Check's default,
 * CK_DEFAULT_TIMEOUT), a checked fixture (run in each test's fork; either
 * may be NULL), its tests in order (at most KIT_MAX_TESTS; a longer list
 * does not compile), then a loop test run for i in [start, end) (Check's
 * tcase_add_loop_test; none when test is NULL), and an unchecked fixture
 * (once for the TCase, in the runner's own process; either may be NULL). */
struct kit_tcase {
    const char *name;
    double timeout_s;
    void (*setup)(void), (*teardown)(void);
    const TTest *tests[KIT_MAX_TESTS + 1];
    struct kit_loop { const TTest *test; int start, end; } loop;
    void (*setup_once)(void), (*teardown_once)(void);
};

/* Runs the suite s (Check's CK_ENV: CK_VERBOSITY chooses the output,
 * CK_NORMAL when unset; CK_FORK and CK_RUN_CASE as usual) and frees it;
 * 0 when every test passed, else 1: main's exit code. For a main that
 * builds its suite itself (loop tests, a suite chosen by its arguments). */
int kit_run_suite(Suite *s);

/* kit_run_suite of the suite `suite` made of the n TCases cases, in order. */
int kit_main(const char *suite, const struct kit_tcase *cases, int n);

/* A runner's main from its TCases, e.g.
 *   KIT_MAIN("rpc", { "calls", 120, .tests = { test_echo, test_add } },
 *                   { "rrefs", 120, .setup = setup, .tests = { test_rref } })
 * (designated after the first two: the fields left out are zero). */
#define KIT_MAIN(suite, ...) \
    int main(void) { return KIT_RUN(suite, __VA_ARGS__); }
/* The same as an expression, for a main that does more (a skip, a base
 * run first): kit_main of the TCases written in place. */
#define KIT_RUN(suite, ...)                                                    \
    kit_main((suite), (const struct kit_tcase[]){ __VA_ARGS__ },             \
             (int)(sizeof((const struct kit_tcase[]){ __VA_ARGS__ }) / sizeof(struct kit_tcase)))

/* ---- waiting -------------------------------------------------------------- */

/* Polls cond(arg) every millisecond or so, up to 20 ms apart, until it is
 * true (returns true) or timeout_s has passed (returns false after one
 * last look). */
bool kit_wait_until(bool (*cond)(void *arg), void *arg, double timeout_s);

/* Waits until the expression cond holds, at most timeout_s, else fails the
 * test naming what it waited for. */
#define KIT_WAIT(cond, timeout_s, what)                                                       \
    do {                                                                                    \
        double kit_end_ = kit_now_s() + (timeout_s);                                        \
        unsigned kit_us_ = 1000;                                                            \
        while (!(cond)) {                                                                   \
            if (kit_now_s() > kit_end_) {                                                   \
                if (cond) break;                                                            \
                kit_fail_wait((what), (timeout_s), __FILE__, __LINE__);                     \
            }                                                                               \
            kit_nap_us(kit_us_);                                                            \
            if (kit_us_ < 20000) kit_us_ *= 2;                                              \
        }                                                                                   \
    } while (0)

/* For KIT_WAIT. */
double kit_now_s(void);
void kit_nap_us(unsigned us);
_Noreturn void kit_fail_wait(const char *what, double timeout_s, const char *file, int line);

#endif
