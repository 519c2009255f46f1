/* A member that dies: w2 kills itself (-9) once w0 and w1 are past a
 * barrier and on their way into an allreduce with it; both fail within the group's timeout with an error
 * naming rank 2 (worker 'w2'), and every later collective of the group
 * fails at once. A member that never comes makes pg_new fail after the
 * timeout instead of hanging, and one alive that never enters a collective
 * makes it fail on the timeout. */
#define DH_HEARTBEAT_TIMEOUT_MS 1000
#include "../dist/dist_harness.h"
#include <stdatomic.h>

#include "pg/process_group.h"
#include "kit.h"

#define GROUP_TIMEOUT_MS 4000

static const char *const ALL[] = {"w0", "w1", "w2"};
static const char *const PREFIX = "pg_allreduce: group 'all': rank 2 (worker 'w2') is gone (";

static atomic_int passed;   /* members that told w2 they left the barrier */
static atomic_int w0_done;  /* w1: w0 has checked its error (w1 leaving earlier would count as gone too) */

static int fn_passed(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_fetch_add(&passed, 1);
    *res = rpc_nil();
    return 0;
}

static int fn_done(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_store(&w0_done, 1);
    *res = rpc_nil();
    return 0;
}

static void register_pg(void)
{
    pg_init();
    rpc_register("t.passed", fn_passed, NULL);
    rpc_register("t.done", fn_done, NULL);
}

/* Tells w2 this member is past the barrier (w2 dies once both are, maybe
 * before it answers the second: the call's result says nothing). */
static void tell_w2(void)
{
    struct rpc_value res = rpc_nil();
    rpc_sync("w2", "t.passed", NULL, &res, 0);
    rpc_value_clear(&res);
}

static int child(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    struct process_group *g = pg_new("all", 3, ALL, GROUP_TIMEOUT_MS);
    if (!g) {
        fprintf(stderr, "w%d: %s\n", rank, pg_last_error());
        return 11;
    }
    if (pg_barrier(g) != 0) return 12;
    if (rank == 2) {                  /* dies once the others are past the barrier */
        while (atomic_load(&passed) < 2) usleep(1000);
        raise(SIGKILL);
    }
    tell_w2();
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){1000});
    int rc = 0;
    if (pg_allreduce(g, t, PG_SUM) == 0 || strncmp(pg_last_error(), PREFIX, strlen(PREFIX))) {
        fprintf(stderr, "w1: allreduce: '%s'\n", pg_last_error());
        rc = 13;
    }
    tensor_free(t);
    pg_free(g);
    while (!atomic_load(&w0_done)) usleep(1000);
    rpc_shutdown(true);
    return rc;
}

START_TEST(test_dead_member_is_named)
{
    dh_extra_register = register_pg;
    dh_start(3, child, NULL);
    struct process_group *g = pg_new("all", 3, ALL, GROUP_TIMEOUT_MS);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    ck_assert_int_eq(pg_barrier(g), 0);
    tell_w2();
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){1000});
    double t0 = trib_now_s();
    ck_assert_int_eq(pg_allreduce(g, t, PG_SUM), -1);
    double took = trib_now_s() - t0;
    ck_assert_msg(!strncmp(pg_last_error(), PREFIX, strlen(PREFIX)), "%s", pg_last_error());
    ck_assert_msg(took < GROUP_TIMEOUT_MS / 1000.0 + 10.0, "took %.1f s", took);
    ck_assert_int_eq(proc_wait(&DH.h, 1, 10), 128 + SIGKILL);
    struct rpc_value res = rpc_nil();
    ck_assert_int_eq(rpc_sync("w1", "t.done", NULL, &res, 0), 0);
    rpc_value_clear(&res);
    char first[640];
    snprintf(first, sizeof first, "%s", pg_last_error() + strlen("pg_allreduce: group 'all': "));
    ck_assert_int_eq(pg_barrier(g), -1);
    char want[800];
    snprintf(want, sizeof want, "pg_barrier: group 'all' is broken by an earlier failure: %s", first);
    ck_assert_str_eq(pg_last_error(), want);
    tensor_free(t);
    pg_free(g);
    dh_stop();
}
END_TEST

static int child_absent(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    if (rank == 1) {
        struct process_group *g = pg_new("late", 3, ALL, 2000);
        if (g || strncmp(pg_last_error(), "pg_new: group 'late': ", 22)) {
            fprintf(stderr, "w1: %s\n", g ? "pg_new succeeded" : pg_last_error());
            pg_free(g);
            rpc_shutdown(true);
            return 11;
        }
    }
    rpc_shutdown(true);
    return 0;
}

/* w2 never calls pg_new: the others fail after the timeout, not hang. */
START_TEST(test_absent_member_times_out)
{
    dh_extra_register = register_pg;
    dh_start(3, child_absent, NULL);
    double t0 = trib_now_s();
    ck_assert_ptr_null(pg_new("late", 3, ALL, 2000));
    double took = trib_now_s() - t0;
    ck_assert_msg(!strncmp(pg_last_error(), "pg_new: group 'late': ", 22), "%s", pg_last_error());
    ck_assert_msg(took < 2.0 + 10.0, "took %.1f s", took);
    dh_stop();
}
END_TEST

static int child_idle(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    const char *const two[] = {"w0", "w1"};
    struct process_group *g = pg_new("idle", 2, two, 2000);
    if (!g) {
        fprintf(stderr, "w1: %s\n", pg_last_error());
        return 11;
    }
    while (!atomic_load(&w0_done)) usleep(1000);   /* alive, but never joins the allreduce */
    pg_free(g);
    rpc_shutdown(true);
    return 0;
}

/* w1 is alive but never enters the allreduce: w0's fails on Gloo's timeout
 * (no member gone to name), then the group is broken. */
START_TEST(test_idle_member_times_out)
{
    dh_extra_register = register_pg;
    dh_start(2, child_idle, NULL);
    const char *const two[] = {"w0", "w1"};
    struct process_group *g = pg_new("idle", 2, two, 2000);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    struct tensor *t = tensor_new(DTYPE_F64, DEVICE_CPU, 1, (int64_t[]){10});
    double t0 = trib_now_s();
    ck_assert_int_eq(pg_allreduce(g, t, PG_SUM), -1);
    double took = trib_now_s() - t0;
    const char *prefix = "pg_allreduce: group 'idle': ";
    ck_assert_msg(!strncmp(pg_last_error(), prefix, strlen(prefix)) && strstr(pg_last_error(), "Timed out") &&
                      !strstr(pg_last_error(), "gone"),
                  "%s", pg_last_error());
    ck_assert_msg(took >= 1.9 && took < 2 * 2.0 + 10.0, "took %.1f s", took);
    ck_assert_int_eq(pg_allreduce(g, t, PG_SUM), -1);
    ck_assert_msg(strstr(pg_last_error(), "is broken by an earlier failure: "), "%s", pg_last_error());
    struct rpc_value res = rpc_nil();
    ck_assert_int_eq(rpc_sync("w1", "t.done", NULL, &res, 0), 0);
    rpc_value_clear(&res);
    tensor_free(t);
    pg_free(g);
    dh_stop();
}
END_TEST

KIT_MAIN("pg_dead",
         { "failures", 120, .tests = { test_dead_member_is_named, test_absent_member_times_out,
           test_idle_member_times_out } })
