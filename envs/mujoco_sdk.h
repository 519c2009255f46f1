/* MuJoCo for env code: MuJoCo's errors made Tributary's error path, a
 * model file opened without blocking, and a model from MJCF text in
 * memory. Header-only (a plug-in links only libmujoco), installed beside
 * env.h when Tributary was built with MuJoCo; used by the built-in v4
 * suite (envs/mujoco/) and by plug-ins (envs/examples/mj_pendulum.c).
 * See envs/README.md "MuJoCo".
 *
 * MuJoCo reports an error (out of memory in mj_makeData, ...) through its
 * global mju_user_error and, when none is set, prints "ERROR: ... Press
 * Enter to exit ..." on stdout, waits for a line on stdin and calls
 * exit(1); its warnings go to stdout and MUJOCO_LOG.TXT. With
 * env_mj_install's handlers, an error inside env_mj_call comes back from
 * it as an error string; one anywhere else is said on stderr ("MuJoCo
 * error outside env_mj_call: ...") and the process aborts, which its
 * parent reports as a crash; a warning goes to stderr. Never the prompt,
 * never exit.
 *
 * Each copy of this header (each file of a program or plug-in that
 * includes it) installs its handlers once until it releases them, chained
 * to the ones it finds:
 * an error that is not inside its own env_mj_call goes on to them. A
 * plug-in calls env_mj_release before it is unloaded (its unload, and the
 * entry point's failures), so MuJoCo never calls into unmapped code. */
#ifndef TRIB_ENVS_MUJOCO_SDK_H
#define TRIB_ENVS_MUJOCO_SDK_H

#include <errno.h>
#include <fcntl.h>
#include <mujoco/mujoco.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
#define ENV_MJ_TLS_ thread_local
#else
#define ENV_MJ_TLS_ _Thread_local
#endif

/* This copy's state: the handlers it replaced, and this thread's
 * env_mj_call in progress (its jump and the message). */
static void (*env_mj_prev_error_)(const char *);
static void (*env_mj_prev_warning_)(const char *);
static pthread_mutex_t env_mj_lock_ = PTHREAD_MUTEX_INITIALIZER;
static int env_mj_installed_;   /* under env_mj_lock_ */
static ENV_MJ_TLS_ jmp_buf *env_mj_jump_;
static ENV_MJ_TLS_ char env_mj_msg_[512];

/* a then b into dst (cap bytes), cut to fit, NUL-terminated. */
static inline void env_mj_copy_(char *dst, size_t cap, const char *a, const char *b)
{
    size_t n = 0;
    for (; *a && n + 1 < cap; a++) dst[n++] = *a;
    for (; *b && n + 1 < cap; b++) dst[n++] = *b;
    if (cap) dst[n] = '\0';
}

static inline void env_mj_on_error_(const char *msg)
{
    if (env_mj_jump_) {
        env_mj_copy_(env_mj_msg_, sizeof env_mj_msg_, msg ? msg : "", "");
        longjmp(*env_mj_jump_, 1);
    }
    if (env_mj_prev_error_) env_mj_prev_error_(msg);   /* another copy's: it jumps, or aborts */
    fprintf(stderr, "MuJoCo error outside env_mj_call: %s\n", msg ? msg : "");
    abort();
}

static inline void env_mj_on_warning_(const char *msg)
{
    fprintf(stderr, "MuJoCo warning: %s\n", msg ? msg : "");
}

/* Installs this copy's handlers (any thread; again after env_mj_release,
 * for a plug-in opened again while its code stayed mapped). Before the
 * first MuJoCo call. */
static inline void env_mj_install(void)
{
    pthread_mutex_lock(&env_mj_lock_);
    if (!env_mj_installed_) {
        env_mj_prev_error_ = mju_user_error;
        env_mj_prev_warning_ = mju_user_warning;
        mju_user_error = env_mj_on_error_;
        mju_user_warning = env_mj_on_warning_;
        env_mj_installed_ = 1;
    }
    pthread_mutex_unlock(&env_mj_lock_);
}

/* Undoes env_mj_install where MuJoCo still has this copy's handlers (a
 * plug-in, before it is unloaded). Not while another thread is in MuJoCo. */
static inline void env_mj_release(void)
{
    pthread_mutex_lock(&env_mj_lock_);
    if (mju_user_error == env_mj_on_error_) mju_user_error = env_mj_prev_error_;
    if (mju_user_warning == env_mj_on_warning_) mju_user_warning = env_mj_prev_warning_;
    env_mj_installed_ = 0;
    pthread_mutex_unlock(&env_mj_lock_);
}

/* fn(arg), with a MuJoCo error inside it caught: 0, or -1 with "MuJoCo:
 * MSG" in err (err_size bytes). What MuJoCo allocated before the error is
 * lost (it frees nothing on its way out), so wrap calls that fail before
 * they allocate much: mj_makeData, a model load. Installs the handlers;
 * calls may nest; any thread. */
static inline int env_mj_call(void (*fn)(void *arg), void *arg, char *err, size_t err_size)
{
    env_mj_install();
    jmp_buf here, *outer = env_mj_jump_;
    if (setjmp(here) != 0) {
        env_mj_jump_ = outer;
        env_mj_copy_(err, err_size, "MuJoCo: ", env_mj_msg_);
        return -1;
    }
    env_mj_jump_ = &here;
    fn(arg);
    env_mj_jump_ = outer;
    return 0;
}

struct env_mj_make_data_ {
    const mjModel *m;
    mjData *d;
};

static inline void env_mj_make_data_fn_(void *arg)
{
    struct env_mj_make_data_ *a = (struct env_mj_make_data_ *)arg;
    a->d = mj_makeData(a->m);
}

/* mj_makeData(m) inside env_mj_call: NULL with err "MuJoCo: Could not
 * allocate memory" (or MuJoCo's other message). */
static inline mjData *env_mj_make_data(const mjModel *m, char *err, size_t err_size)
{
    struct env_mj_make_data_ a = { m, NULL };
    if (env_mj_call(env_mj_make_data_fn_, &a, err, err_size) != 0) return NULL;
    if (!a.d) snprintf(err, err_size, "MuJoCo: mj_makeData failed");
    return a.d;
}

/* Whether path names a regular file (links followed), asked without
 * blocking: opened O_NONBLOCK, so a FIFO with no writer is not waited on.
 * 0, or -1 with err "not a regular file (a FIFO)" or "No such file or
 * directory" (the caller names the path). */
static inline int env_mj_check_file(const char *path, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);   /* closed at once */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        env_mj_copy_(err, err_size, strerror(errno), "");
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    if (S_ISREG(st.st_mode)) return 0;
    snprintf(err, err_size, "not a regular file (%s)",
             S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
             : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a socket or the like");
    return -1;
}

/* mj_loadXML's message (mjerr, changed) into err: on one line, none at
 * the end ("mj_loadXML failed" when it said nothing). */
static inline void env_mj_load_error_(char *err, size_t err_size, char *mjerr)
{
    for (char *c = mjerr; *c; c++)
        if (*c == '\n') *c = ' ';
    for (size_t n = strlen(mjerr); n > 0 && mjerr[n - 1] == ' ';) mjerr[--n] = '\0';
    env_mj_copy_(err, err_size, mjerr[0] ? mjerr : "mj_loadXML failed", "");
}

struct env_mj_load_ {
    const char *path;
    char *err;
    int cap;
    mjModel *m;
};

static inline void env_mj_load_fn_(void *arg)
{
    struct env_mj_load_ *a = (struct env_mj_load_ *)arg;
    a->m = mj_loadXML(a->path, NULL, a->err, a->cap);
}

/* The MJCF model file at path: refused unless a regular file
 * (env_mj_check_file: a FIFO, a device, a directory never block the
 * load), then mj_loadXML inside env_mj_call. NULL with err, which the
 * caller prefixes with the path ("not a regular file (a FIFO)", or
 * MuJoCo's message on one line). A file swapped for a FIFO between the
 * check and the load is the doing of whoever named the path. */
static inline mjModel *env_mj_load_xml(const char *path, char *err, size_t err_size)
{
    if (env_mj_check_file(path, err, err_size) != 0) return NULL;
    char mjerr[1000] = "";
    struct env_mj_load_ a = { path, mjerr, (int)sizeof mjerr, NULL };
    if (env_mj_call(env_mj_load_fn_, &a, err, err_size) != 0) return NULL;
    if (a.m) return a.m;
    env_mj_load_error_(err, err_size, mjerr);
    return NULL;
}

struct env_mj_load_string_ {
    const char *name, *xml;
    char *err;
    int cap;
    mjModel *m;
};

static inline void env_mj_load_string_fn_(void *arg)
{
    struct env_mj_load_string_ *a = (struct env_mj_load_string_ *)arg;
    mjVFS *vfs = (mjVFS *)malloc(sizeof *vfs);   /* ~2 MB: not on the stack */
    if (!vfs) {
        snprintf(a->err, (size_t)a->cap, "out of memory for MuJoCo's VFS");
        return;
    }
    mj_defaultVFS(vfs);
    int size = (int)strlen(a->xml);
    int rc = mj_makeEmptyFileVFS(vfs, a->name, size);
    int i = rc == 0 ? mj_findFileVFS(vfs, a->name) : -1;
    if (i < 0) {
        snprintf(a->err, (size_t)a->cap, "cannot make %s in MuJoCo's VFS (%d)", a->name, rc);
    } else {
        memcpy(vfs->filedata[i], a->xml, (size_t)size);
        a->m = mj_loadXML(a->name, vfs, a->err, a->cap);
    }
    mj_deleteVFS(vfs);
    free(vfs);
}

/* The model from MJCF text in memory (xml, NUL-terminated), loaded as the
 * file `name` through MuJoCo's VFS, inside env_mj_call (the handlers
 * installed). NULL with err (MuJoCo's message on one line). */
static inline mjModel *env_mj_load_string(const char *name, const char *xml, char *err, size_t err_size)
{
    char mjerr[1000] = "";
    struct env_mj_load_string_ a = { name, xml, mjerr, (int)sizeof mjerr, NULL };
    if (env_mj_call(env_mj_load_string_fn_, &a, err, err_size) != 0) return NULL;
    if (a.m) return a.m;
    env_mj_load_error_(err, err_size, mjerr);
    return NULL;
}

#ifdef __cplusplus
}
#endif
#endif
