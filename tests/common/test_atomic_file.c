/* common/atomic_file.h on real files in a scratch directory: the content
 * is replaced whole (the old file stays readable through a descriptor
 * opened before, the final path never holds a part, no temporary file is
 * left); a failing write (a missing or unwritable directory, a write past
 * RLIMIT_FSIZE) leaves the old file intact, removes the temporary file and
 * reports "<who>: <path>: <strerror>" with errno set; concurrent writers of
 * one path leave one writer's whole content. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "kit.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/trib_atomic_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { kit_rm_rf(dir); }

/* dir/name (tests/kit: 8 rotating buffers). */
static const char *P(const char *name) { return kit_path(dir, name); }

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* The names in dir, sorted, space-separated. */
static void list_dir(char *out, size_t cap)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            if (out[0]) strncat(out, " ", cap - strlen(out) - 1);
            strncat(out, names[i]->d_name, cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

static void assert_content(const char *path, const char *want)
{
    char *b = kit_must_read(path, NULL);
    ck_assert_str_eq(b, want);
    free(b);
}

START_TEST(test_replace)
{
    put_file(P("f"), "old");
    int old_fd = open(P("f"), O_RDONLY);
    ck_assert_int_ge(old_fd, 0);
    struct atomic_file a;
    ck_assert_int_eq(atomic_file_open(&a, P("f"), "test"), 0);
    ck_assert_int_eq(atomic_file_write(&a, "new ", 4), 0);
    ck_assert_int_eq(atomic_file_write(&a, NULL, 0), 0);
    /* before the commit: the old file whole, the new one under a temporary name */
    assert_content(P("f"), "old");
    char names[512];
    list_dir(names, sizeof names);
    char want[128];
    snprintf(want, sizeof want, ".f.%d.", (int)getpid());
    ck_assert_msg(strncmp(names, want, strlen(want)) == 0 && strstr(names, ".tmp f"), "%s", names);
    ck_assert_int_eq(atomic_file_write(&a, "content", 7), 0);
    ck_assert_int_eq(atomic_file_commit(&a, "test"), 0);
    ck_assert_ptr_null(a.tmp);
    assert_content(P("f"), "new content");
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "f");
    /* the old file was replaced, not written over: a reader of it still reads it whole */
    char buf[16] = { 0 };
    ck_assert_int_eq(pread(old_fd, buf, sizeof buf - 1, 0), 3);
    ck_assert_str_eq(buf, "old");
    close(old_fd);
    /* the one-call form; a path with no directory part (the current one) */
    ck_assert_int_eq(atomic_file_replace(P("f"), "third", 5, "test"), 0);
    assert_content(P("f"), "third");
    int cwd = open(".", O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(cwd, 0);
    ck_assert_int_eq(chdir(dir), 0);
    int rc = atomic_file_replace("g", "", 0, "test");
    ck_assert_int_eq(fchdir(cwd), 0);
    close(cwd);
    ck_assert_int_eq(rc, 0);
    assert_content(P("g"), "");
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "f g");
}
END_TEST

START_TEST(test_abort)
{
    struct atomic_file a;
    put_file(P("f"), "old");
    ck_assert_int_eq(atomic_file_open(&a, P("f"), "test"), 0);
    ck_assert_int_eq(atomic_file_write(&a, "new!", 4), 0);
    atomic_file_abort(&a);
    atomic_file_abort(&a);   /* a no-op the second time */
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "f");
    assert_content(P("f"), "old");
    ck_assert_int_eq(atomic_file_open(&a, P("f"), "test"), 0);
    ck_assert_int_eq(atomic_file_commit(&a, "test"), 0);
    atomic_file_abort(&a);   /* a no-op after commit */
    assert_content(P("f"), "");
}
END_TEST

/* Each failure: -1, the message, errno, the old file intact, nothing left. */
START_TEST(test_open_errors)
{
    put_file(P("f"), "old");
    errno = 0;
    ck_assert_int_eq(atomic_file_replace(P("nodir/f"), "x", 1, "writer"), -1);
    ck_assert_int_eq(errno, ENOENT);
    char want[512];
    snprintf(want, sizeof want, "writer: %s: No such file or directory", P("nodir/f"));
    ck_assert_str_eq(atomic_file_last_error(), want);
    ck_assert_int_eq(atomic_file_replace(P("nodir/f"), "x", 1, NULL), -1);   /* no "<who>: " */
    snprintf(want, sizeof want, "%s: No such file or directory", P("nodir/f"));
    ck_assert_str_eq(atomic_file_last_error(), want);
    ck_assert_int_eq(atomic_file_replace(P("f/g"), "x", 1, "writer"), -1);
    ck_assert_int_eq(errno, ENOTDIR);
    snprintf(want, sizeof want, "writer: %s: Not a directory", P("f/g"));
    ck_assert_str_eq(atomic_file_last_error(), want);
    ck_assert_int_eq(atomic_file_replace(P(""), "x", 1, "writer"), -1);
    snprintf(want, sizeof want, "writer: %s/: not a file name", dir);
    ck_assert_str_eq(atomic_file_last_error(), want);
    if (geteuid() != 0) {   /* root writes into a directory of mode 0500 all the same */
        ck_assert_int_eq(chmod(dir, 0500), 0);
        ck_assert_int_eq(atomic_file_replace(P("f"), "x", 1, "writer"), -1);
        ck_assert_int_eq(errno, EACCES);
        snprintf(want, sizeof want, "writer: %s: Permission denied", P("f"));
        ck_assert_str_eq(atomic_file_last_error(), want);
        ck_assert_int_eq(chmod(dir, 0700), 0);
    } else {
        fprintf(stderr, "test_open_errors: running as root: the unwritable-directory case skipped\n");
    }
    assert_content(P("f"), "old");
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "f");
}
END_TEST

/* A real write failure for anyone, root included: past RLIMIT_FSIZE a write
 * fails with EFBIG (SIGXFSZ ignored). */
START_TEST(test_write_error_keeps_old_file)
{
    put_file(P("f"), "old");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = { .rlim_cur = 1000, .rlim_max = RLIM_INFINITY };
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    static char big[64 * 1024];
    memset(big, 'x', sizeof big);
    struct atomic_file a;
    ck_assert_int_eq(atomic_file_open(&a, P("f"), "writer"), 0);
    /* the limit only around the writes, with no ck_assert inside: Check's own
     * result file (it records every assertion) must not meet it */
    int limited = setrlimit(RLIMIT_FSIZE, &lim);
    for (int i = 0; i < 4; i++) atomic_file_write(&a, big, sizeof big);   /* written all, checked once */
    errno = 0;
    int rc = atomic_file_commit(&a, "writer"), e = errno;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(limited, 0);
    ck_assert_int_eq(rc, -1);
    ck_assert_int_eq(e, EFBIG);
    char want[512];
    snprintf(want, sizeof want, "writer: %s: File too large", P("f"));
    ck_assert_str_eq(atomic_file_last_error(), want);
    ck_assert_ptr_null(a.tmp);
    assert_content(P("f"), "old");
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "f");
    /* a smaller file under the limit still replaces it */
    limited = setrlimit(RLIMIT_FSIZE, &lim);
    rc = atomic_file_replace(P("f"), big, 999, "writer");
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(limited, 0);
    ck_assert_int_eq(rc, 0);
    struct stat st;
    ck_assert_int_eq(stat(P("f"), &st), 0);
    ck_assert_int_eq(st.st_size, 999);
}
END_TEST

/* Writers of one path at once: each commit replaces the file whole (their
 * temporary names differ), so the file is always one writer's content. */
#define WRITERS 4
#define ROUNDS 50
#define SIZE 8192

static char shared_path[256];

/* Returns NULL, or its error (malloc'd). */
static void *writer(void *arg)
{
    char *buf = malloc(SIZE);
    memset(buf, 'a' + (int)(intptr_t)arg, SIZE);
    char *err = NULL;
    for (int i = 0; i < ROUNDS && !err; i++)
        if (atomic_file_replace(shared_path, buf, SIZE, "writer") != 0) err = strdup(atomic_file_last_error());
    free(buf);
    return err;
}

START_TEST(test_concurrent_writers)
{
    pthread_t t[WRITERS];
    const char *path = strcpy(shared_path, P("shared"));
    for (int i = 0; i < WRITERS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "rb");
        if (!f) continue;   /* not written yet */
        static char b[SIZE + 1];
        size_t n = fread(b, 1, sizeof b, f);
        fclose(f);
        ck_assert_int_eq(n, SIZE);
        for (size_t k = 1; k < n; k++) ck_assert_int_eq(b[k], b[0]);
    }
    for (int i = 0; i < WRITERS; i++) {
        void *r;
        pthread_join(t[i], &r);
        ck_assert_msg(r == NULL, "writer %d: %s", i, (char *)r);
    }
    char names[512];
    list_dir(names, sizeof names);
    ck_assert_str_eq(names, "shared");
}
END_TEST

KIT_MAIN("atomic_file",
         { "files", 0, .setup = setup, .teardown = teardown, .tests = { test_replace, test_abort, test_open_errors,
           test_write_error_keeps_old_file, test_concurrent_writers } })
