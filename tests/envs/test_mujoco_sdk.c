/* envs/mujoco_sdk.h with the real MuJoCo (issue 33): a MuJoCo error is
 * Tributary's error path, never MuJoCo's "Press Enter to exit" and exit
 * (trib-env on Hopper-v4 and on the example plug-in MjPendulum-v0, built
 * in the tree from envs/examples/mj_pendulum.c, whose mj_makeData fails
 * for want of memory under a limit on the address space); a model path
 * that is not a regular file (a FIFO) is refused without blocking, by the
 * helper and by the plug-in; trib-env's --num-envs is bounded for an env
 * whose envs hold their own simulator. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"
#include "envs/mujoco_sdk.h"
#include "envs/plugin.h"
#include "kit.h"

static char OUT[1 << 16], ERR[1 << 16];
static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/test_mujoco_sdk_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
}

/* sh -c cmd, stdin /dev/null, within 60 s (then killed: a failure naming
 * the command); its exit status, OUT and ERR filled. */
static int sh(const char *cmd)
{
    const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
    int rc = 0;
    ck_assert_msg(proc_run(argv, 60, OUT, sizeof OUT, ERR, sizeof ERR, &rc) == 0, "starting sh: %s", strerror(errno));
    ck_assert_msg(rc != -1, "'%s' did not end within 60 s\nstdout:\n%s\nstderr:\n%s", cmd, OUT, ERR);
    return rc;
}

static const char pendulum_xml[] =
    "<mujoco>%s<option timestep=\"0.02\" integrator=\"RK4\"/><worldbody>"
    "<body name=\"cart\"><joint name=\"slider\" type=\"slide\" axis=\"1 0 0\" range=\"-1 1\" limited=\"true\"/>"
    "<geom type=\"box\" size=\"0.1 0.1 0.1\" mass=\"1\"/>"
    "<body name=\"pole\"><joint name=\"hinge\" type=\"hinge\" axis=\"0 1 0\"/>"
    "<geom type=\"capsule\" fromto=\"0 0 0 0 0 0.6\" size=\"0.05\" mass=\"0.1\"/></body></body></worldbody>"
    "<actuator><motor joint=\"slider\" gear=\"100\" ctrlrange=\"-3 3\" ctrllimited=\"true\"/></actuator></mujoco>\n";

static void write_model(const char *path, const char *size_element)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, pendulum_xml, size_element);
    ck_assert_int_eq(fclose(f), 0);
}

/* A FIFO (no writer), a directory, a missing file: refused by name at
 * once, not waited on; a regular file loads. Before the helper,
 * mj_loadXML opened the FIFO and waited for a writer. */
START_TEST(model_path_not_regular)
{
    char fifo[128], ok[128], missing[128], err[1200];
    snprintf(fifo, sizeof fifo, "%s/model.xml", tmp);
    snprintf(ok, sizeof ok, "%s/ok.xml", tmp);
    snprintf(missing, sizeof missing, "%s/none.xml", tmp);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    write_model(ok, "");
    double t0 = trib_now_s();
    ck_assert_ptr_null(env_mj_load_xml(fifo, err, sizeof err));
    ck_assert_str_eq(err, "not a regular file (a FIFO)");
    ck_assert_ptr_null(env_mj_load_xml(tmp, err, sizeof err));
    ck_assert_str_eq(err, "not a regular file (a directory)");
    ck_assert_ptr_null(env_mj_load_xml(missing, err, sizeof err));
    ck_assert_str_eq(err, "No such file or directory");
    mjModel *m = env_mj_load_xml(ok, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_int_eq(m->nu, 1);
    mj_deleteModel(m);

    /* the example plug-in through the loader, as a resumed config.json's
     * --env-arg model=FIFO reaches it */
    char arg[160], want[1200];
    snprintf(arg, sizeof arg, "%s", fifo);
    const char *keys[] = { "model" }, *values[] = { arg };
    struct env_args a = { 1, keys, values };
    struct env_plugin *pl = NULL;
    ck_assert_ptr_null(env_open_args(MJ_PENDULUM_SO, &a, &pl));
    snprintf(want, sizeof want, "plugin %s: model %s: not a regular file (a FIFO)", MJ_PENDULUM_SO, fifo);
    ck_assert_str_eq(env_last_error(), want);
    ck_assert_msg(trib_now_s() - t0 < 10, "refusing took %.1f s", trib_now_s() - t0);
    /* and it loads from a regular file */
    values[0] = ok;
    const struct env_spec *spec = env_open_args(MJ_PENDULUM_SO, &a, &pl);
    ck_assert_msg(spec != NULL, "%s", env_last_error());
    ck_assert_str_eq(spec->id, "MjPendulum-v0");
    env_plugin_close(pl);
}
END_TEST

/* An error inside env_mj_call comes back as a message; calls nest. */
static void raise_error(void *arg)
{
    (void)arg;
    mju_error("deliberate error");
}

static void nested(void *arg)
{
    char err[200];
    ck_assert_int_eq(env_mj_call(raise_error, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "MuJoCo: deliberate error");
    *(int *)arg = 1;
}

START_TEST(error_in_call)
{
    char err[200];
    ck_assert_int_eq(env_mj_call(raise_error, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "MuJoCo: deliberate error");
    int reached = 0;
    ck_assert_int_eq(env_mj_call(nested, &reached, err, sizeof err), 0);
    ck_assert_int_eq(reached, 1);
}
END_TEST

/* install, release, install again: the handlers are this copy's again (a
 * plug-in closed and opened again while its code stayed mapped, as when
 * another handle holds it, must not run without them); release gives back
 * what it found. Before: installed once per copy (pthread_once), so after
 * a release MuJoCo's own "Press Enter" and exit came back for good. */
START_TEST(install_after_release)
{
    void (*before)(const char *) = mju_user_error;
    env_mj_install();
    void (*ours)(const char *) = mju_user_error;
    ck_assert_ptr_ne((void *)ours, (void *)before);
    env_mj_release();
    ck_assert_ptr_eq((void *)mju_user_error, (void *)before);
    env_mj_install();
    ck_assert_msg(mju_user_error == ours, "env_mj_install after env_mj_release installed nothing");
    char err[200];
    ck_assert_int_eq(env_mj_call(raise_error, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "MuJoCo: deliberate error");
    env_mj_release();
    ck_assert_ptr_eq((void *)mju_user_error, (void *)before);
}
END_TEST

/* MuJoCo runs out of memory in mj_makeData (an address-space limit set in
 * the child: Hopper-v4's mjData is megabytes; the plug-in's model asks an
 * 800 MB stack an env): trib-env says so on stderr and exits 1, nothing on stdout
 * of MuJoCo's prompt. Before the handlers: "ERROR: Could not allocate
 * memory ... Press Enter to exit ..." on stdout and exit(1) (or a wait on
 * an open stdin). */
START_TEST(out_of_memory_is_an_error)
{
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "out_of_memory_is_an_error: skipped: AddressSanitizer reserves more address space than the "
                    "limit this test sets\n");
    return;
#endif
    char cmd[1024], big[128];
    snprintf(cmd, sizeof cmd, "ulimit -v 400000 && exec '%s' Hopper-v4 --num-envs 4096 -e 1", TRIB_ENV_TOOL);
    int rc = sh(cmd);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    ck_assert_msg(!strstr(OUT, "Press Enter") && !strstr(OUT, "ERROR"), "MuJoCo's prompt on stdout:\n%s", OUT);
    ck_assert_msg(strstr(ERR, "trib-env: vec_env_new: env ") &&
                      strstr(ERR, " of Hopper-v4: mj_makeData: MuJoCo: Could not allocate memory\n"),
                  "stderr:\n%s", ERR);

    snprintf(big, sizeof big, "%s/big.xml", tmp);
    write_model(big, "<size nstack=\"100000000\"/>");   /* 800 MB an env: the model compiles, envs run out */
    snprintf(cmd, sizeof cmd, "ulimit -v 2000000 && exec '%s' --env-arg 'model=%s' '%s' --num-envs 8 -e 1",
             TRIB_ENV_TOOL, big, MJ_PENDULUM_SO);
    rc = sh(cmd);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    ck_assert_msg(!strstr(OUT, "Press Enter") && !strstr(OUT, "ERROR"), "MuJoCo's prompt on stdout:\n%s", OUT);
    ck_assert_msg(strstr(ERR, "trib-env: vec_env_new: env ") &&
                      strstr(ERR, " of MjPendulum-v0: mj_makeData: MuJoCo: Could not allocate memory\n"),
                  "stderr:\n%s", ERR);
}
END_TEST

/* --num-envs of an env whose envs each hold a simulator: at most 4096. */
START_TEST(num_envs_bounded)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "exec '%s' Hopper-v4 --num-envs 1048576 -e 1", TRIB_ENV_TOOL);
    int rc = sh(cmd);
    ck_assert_msg(rc == 2, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, OUT, ERR);
    ck_assert_str_eq(ERR, "trib-env: --num-envs 1048576 is too large for Hopper-v4, whose envs each hold their own "
                          "resources (max 4096)\n");
    ck_assert_str_eq(OUT, "");
}
END_TEST

KIT_MAIN("mujoco_sdk",
         { "sdk", 120, .setup = setup, .teardown = teardown, .tests = { model_path_not_regular, error_in_call, install_after_release,
           out_of_memory_is_an_error,
           num_envs_bounded } })
