/* Process groups on Gloo: a world of three processes; the group of all
 * three (served by w0) and a group of two inside it (w2 and w1, served by
 * w2), each running every collective over every dtype and several sizes
 * with exact results; a one-member group; argument errors by name. */
#include "../dist/dist_harness.h"
#include "pg_checks.h"
#include "kit.h"

static char flag_dir[64];

static void flag_path(const char *group, char *out, size_t cap) { snprintf(out, cap, "%s/%s.flag", flag_dir, group); }

static void register_pg(void) { pg_init(); }

/* Runs the checks on group `name` of n workers; 0 or a message on stderr. */
static int child_group(const char *name, int n, const char *const *ws)
{
    struct process_group *g = pg_new(name, n, ws, 20000);
    if (!g) {
        fprintf(stderr, "%s: %s\n", rpc_self()->name, pg_last_error());
        return -1;
    }
    char path[128], why[512];
    flag_path(name, path, sizeof path);
    int rc = pc_run_all(g, path, why, sizeof why);
    if (rc) fprintf(stderr, "%s: group %s: %s\n", rpc_self()->name, name, why);
    pg_free(g);
    return rc;
}

static const char *const ALL[] = {"w0", "w1", "w2"};
static const char *const PAIR[] = {"w2", "w1"};

static int child(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    int rc = child_group("all", 3, ALL) ? 11 : 0;
    if (rc == 0) rc = child_group("pair", 2, PAIR) ? 12 : 0;
    rpc_shutdown(true);
    return rc;
}

START_TEST(test_groups_of_three_and_two)
{
    snprintf(flag_dir, sizeof flag_dir, "/tmp/trib_pg_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(flag_dir));
    dh_extra_register = register_pg;
    dh_start(3, child, NULL);
    struct process_group *g = pg_new("all", 3, ALL, 20000);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    ck_assert_int_eq(pg_rank(g), 0);
    ck_assert_int_eq(pg_size(g), 3);
    ck_assert_str_eq(pg_worker(g, 2), "w2");
    char path[128], why[512];
    flag_path("all", path, sizeof path);
    ck_assert_msg(pc_run_all(g, path, why, sizeof why) == 0, "%s", why);

    /* refused before any communication, naming the problem */
    struct tensor *i32 = tensor_new(DTYPE_I32, DEVICE_CPU, 1, (int64_t[]){3});
    ck_assert_int_eq(pg_allreduce(g, i32, PG_AVG), -1);
    ck_assert_str_eq(pg_last_error(), "pg_allreduce: group 'all': an average needs a floating dtype, not i32");
    ck_assert_int_eq(pg_broadcast(g, i32, 5), -1);
    ck_assert_str_eq(pg_last_error(), "pg_broadcast: group 'all': root 5 is outside 0..2");
    struct tensor *out = tensor_new(DTYPE_I32, DEVICE_CPU, 1, (int64_t[]){8});
    ck_assert_int_eq(pg_allgather(g, i32, out), -1);
    ck_assert_str_eq(pg_last_error(), "pg_allgather: group 'all': out must be i32 with 9 elements, got i32 with 8");
    tensor_free(i32);
    tensor_free(out);
    pg_free(g);

    ck_assert_ptr_null(pg_new("x", 2, (const char *const[]){"w0", "nobody"}, 0));
    ck_assert_str_eq(pg_last_error(), "pg_new: group 'x': unknown worker 'nobody'");
    ck_assert_ptr_null(pg_new("y", 2, PAIR, 0));
    ck_assert_str_eq(pg_last_error(), "pg_new: group 'y': this worker ('w0') is not a member");
    ck_assert_ptr_null(pg_new("z", 2, (const char *const[]){"w0", "w0"}, 0));
    ck_assert_str_eq(pg_last_error(), "pg_new: group 'z': worker 'w0' is listed twice");
    ck_assert_ptr_null(pg_new("", 1, ALL, 0));
    ck_assert_str_eq(pg_last_error(), "pg_new: the group name must be 1..47 bytes");

    /* a group of one: every collective is the identity */
    struct process_group *solo = pg_new("solo", 1, ALL, 0);
    ck_assert_msg(solo != NULL, "%s", pg_last_error());
    struct tensor *t = pc_filled(DTYPE_F64, 10, 4);
    ck_assert_int_eq(pg_allreduce(solo, t, PG_AVG), 0);
    for (int i = 0; i < 10; i++) ck_assert(pc_load(t, i) == (double)pc_value(4, i));
    ck_assert_int_eq(pg_barrier(solo), 0);
    tensor_free(t);
    pg_free(solo);

    dh_stop();
    rmdir(flag_dir);
}
END_TEST

KIT_MAIN("pg",
         { "gloo", 240, .tests = { test_groups_of_three_and_two } })
