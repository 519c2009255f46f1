/* scripts/graph-check, the tree's graph check (issue 26): run as a real
 * program over small fixture trees (tests/common/graph_fixture) it fails,
 * naming the files, on a circle of calls, on a circle only a tool pairing
 * foo.h with foo.c sees, and on a call up a layer; it passes a tree whose
 * header only forward-declares the other's type; and over this source tree
 * (with --layers) it finds no circle and nothing upward. Needs python3 and
 * ctags (scripts/setup): without ctags the test is skipped (77). */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "kit.h"

/* proc_spawn runs a path: the program's on $PATH, or false. */
static bool on_path(const char *prog, char *buf, size_t cap)
{
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, cap, "%.*s/%s", (int)n, path, prog);
        if (n && access(buf, X_OK) == 0) return true;
        path += n + (path[n] == ':');
    }
    return false;
}

static const char *source_dir(void)
{
    const char *d = getenv("TRIB_SOURCE_DIR");
    return d ? d : ".";
}

/* Runs graph-check with --root root (under the source tree unless NULL:
 * the tree itself) and extra args; returns its exit status, out its stdout. */
static int run_check(const char *root, const char *extra, char *out, size_t cap)
{
    char script[4096], rootp[4096];
    snprintf(script, sizeof script, "%s/scripts/graph-check", source_dir());
    snprintf(rootp, sizeof rootp, "%s/%s", source_dir(), root ? root : "");
    char python[4096];
    ck_assert(on_path("python3", python, sizeof python));
    const char *argv[] = {python, script, "--root", rootp, extra, NULL};
    char err[4096];
    int rc;
    ck_assert_int_eq(proc_run(argv, 120, out, cap, err, sizeof err, &rc), 0);
    if (err[0]) fprintf(stderr, "graph-check: %s\n", err);
    return rc;
}

#define FIX "tests/common/graph_fixture/"
static char out[1 << 20];

START_TEST(test_circle_of_calls)
{
    ck_assert_int_eq(run_check(FIX "calls", NULL, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\n## lib/\n# includes\nnone\n# calls (and variable uses) between .c files\n"
                                      "x.c -> y.c\ny.c -> x.c\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n# circles of calls\ncircle of calls, 2: lib/x.c lib/y.c\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n2 problem(s)\n"));
}
END_TEST

START_TEST(test_circle_of_units)
{
    ck_assert_int_eq(run_check(FIX "units", NULL, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\n# circles of calls\nnone\n"));
    ck_assert_ptr_nonnull(strstr(out, "\ncircle of units (foo.h with foo.c), 2: lib/p.c lib/q.c\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n1 problem(s)\n"));
}
END_TEST

START_TEST(test_forward_declaration_is_no_use)
{
    ck_assert_int_eq(run_check(FIX "clean", NULL, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "\n# circles of units (foo.h with foo.c)\nnone\n"));
    ck_assert_ptr_nonnull(strstr(out, "\nno circle\n"));
}
END_TEST

START_TEST(test_call_up_a_layer)
{
    ck_assert_int_eq(run_check(FIX "upward", "--layers", out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "\n# upward (or unlayered)\n"
                                      "common/low.c (common) calls tensor/high.c (tensor): high_value\n"));
    /* and without --layers the same tree passes: no circle in it */
    ck_assert_int_eq(run_check(FIX "upward", NULL, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "\nno circle\n"));
}
END_TEST

START_TEST(test_source_tree)
{
    int rc = run_check(NULL, "--layers", out, sizeof out);
    const char *tail = strstr(out, "\n# circles of calls");
    if (rc != 0) fprintf(stderr, "%s\n", tail ? tail : out);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "\nno circle, nothing upward\n"));
}
END_TEST

static int have_ctags(void)
{
    char ctags[4096];
    if (!on_path("ctags", ctags, sizeof ctags)) return 0;
    const char *argv[] = {ctags, "--version", NULL};
    struct proc_group g;
    proc_group_init(&g);
    int i = proc_spawn(&g, argv, PROC_DISCARD, PROC_DISCARD);
    int ok = i >= 0 && proc_wait(&g, i, 30) == 0;
    proc_group_deinit(&g);
    return ok;
}

int main(void)
{
    if (!have_ctags()) {
        fprintf(stderr, "test_graph_check: skipped: ctags is not installed (scripts/setup installs universal-ctags)\n");
        return 77;
    }
    return KIT_RUN("graph_check",
             { "graph_check", 120, .tests = { test_circle_of_calls, test_circle_of_units,
               test_forward_declaration_is_no_use, test_call_up_a_layer, test_source_tree } });
}
