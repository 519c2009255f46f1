/* Process groups against a member that does not play along (issue 24,
 * N1-N4), each with real processes on loopback:
 * - mismatched sizes, dtypes, shapes, roots, reductions and collectives
 *   fail on every member with the same error naming both sides, kill no
 *   one (Gloo used to throw in its event loop: signal 6), and leave the
 *   group usable;
 * - ddp_new compares parameter counts and shapes across members;
 * - a worker of the world that is not in a group cannot take a member's
 *   place in its rendezvous (it used to get the group's allreduce);
 * - junk written to rank 0's store, by a non-member or a member, is
 *   refused by name, bounded, and breaks no group; a store serves only the
 *   groups it hosts. */
#include "../dist/dist_harness.h"
#include <stdatomic.h>

#include "pg/ddp.h"
#include "pg_checks.h"
#include "kit.h"

#define GROUP_TIMEOUT_MS 10000

static const char *const PAIR[] = {"w0", "w1"};

static atomic_int go;       /* set by t.go: the step this process waits for */

static int fn_go(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_fetch_add(&go, 1);
    *res = rpc_nil();
    return 0;
}

static void register_pg(void)
{
    pg_init();
    rpc_register("t.go", fn_go, NULL);
}

/* Waits until t.go has been called k times in all (60 s at most). */
static int wait_go(int k)
{
    for (int i = 0; i < 60000 && atomic_load(&go) < k; i++) usleep(1000);
    return atomic_load(&go) >= k ? 0 : -1;
}

static int tell(const char *to)
{
    struct rpc_value res = rpc_nil();
    int rc = rpc_sync(to, "t.go", NULL, &res, 0);
    rpc_value_clear(&res);
    return rc;
}

/* A raw call of the store's RPC functions, as any worker of the world can
 * make one: pg._store_set(group, key, nbytes of 'x') or, with nbytes < 0,
 * pg._store_get(group, key). 0, or -1 with the error in err. */
static int raw_store(const char *to, const char *group, const char *key, long nbytes, char *err, size_t cap)
{
    bool set = nbytes >= 0;
    struct rpc_value args = rpc_list(set ? 3 : 2), res = rpc_nil();
    args.list.items[0] = rpc_str(group);
    args.list.items[1] = rpc_str(key);
    if (set) {
        char *junk = malloc((size_t)nbytes + 1);
        memset(junk, 'x', (size_t)nbytes);
        args.list.items[2] = rpc_bytes(junk, (size_t)nbytes);
        free(junk);
    }
    int rc = rpc_sync(to, set ? "pg._store_set" : "pg._store_get", &args, &res, 0);
    snprintf(err, cap, "%s", rc ? rpc_last_error() : "");
    rpc_value_clear(&args);
    rpc_value_clear(&res);
    return rc;
}

#define FAIL(...) (snprintf(why, cap, __VA_ARGS__), -1)

/* Expects call to fail with exactly want. */
#define EXPECT_ERR(call, want)                                                                    \
    do {                                                                                          \
        if ((call) == 0) return FAIL("%s: succeeded, expected '%s'", #call, (want));              \
        if (strcmp(pg_last_error(), (want)))                                                      \
            return FAIL("%s: '%s', expected '%s'", #call, pg_last_error(), (want));               \
    } while (0)

#define EXPECT_RAW(call, want)                                                                    \
    do {                                                                                          \
        char e_[640];                                                                             \
        if (call(e_, sizeof e_) == 0) return FAIL("%s: accepted, expected '%s'", #call, (want));  \
        if (strcmp(e_, (want))) return FAIL("%s: '%s', expected '%s'", #call, e_, (want));        \
    } while (0)

/* ---- N1, N4: mismatched collectives --------------------------------------------------- */

static struct tensor *filled(enum dtype dt, int ndim, const int64_t *shape, int r)
{
    struct tensor *t = tensor_new(dt, DEVICE_CPU, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++) pc_store(t, i, (double)pc_value(r, i));
    return t;
}

/* Whether t still holds rank r's values. */
static bool intact(const struct tensor *t, int r)
{
    for (int64_t i = 0; i < t->numel; i++)
        if (pc_load(t, i) != (double)pc_value(r, i)) return false;
    return true;
}

/* Each mismatch, the same on both members of g (w0, w1), by rank r: every
 * one fails on both with the same text, the tensors untouched; then a
 * matching allreduce is exact. */
static int mismatches(struct process_group *g, int r, char *why, size_t cap)
{
    static const char *const P = "group 'g': rank 0 (worker 'w0') has ";
    char want[512];
    struct tensor *a, *b;

    /* the N1: the member with the smaller buffer used to abort */
    a = filled(DTYPE_F32, 1, (int64_t[]){r ? 12 : 1000}, r);
    snprintf(want, sizeof want, "pg_allreduce: %sf32[1000], rank 1 (worker 'w1') has f32[12]", P);
    EXPECT_ERR(pg_allreduce(g, a, PG_SUM), want);
    if (!intact(a, r)) return FAIL("allreduce: the tensor changed");
    tensor_free(a);

    a = filled(r ? DTYPE_I32 : DTYPE_F32, 1, (int64_t[]){12}, r);
    snprintf(want, sizeof want, "pg_allreduce: %sf32[12], rank 1 (worker 'w1') has i32[12]", P);
    EXPECT_ERR(pg_allreduce(g, a, PG_SUM), want);
    tensor_free(a);

    a = filled(DTYPE_F64, 1, (int64_t[]){4}, r);
    snprintf(want, sizeof want, "pg_allreduce: group 'g': rank 0 (worker 'w0') has reduction sum, "
             "rank 1 (worker 'w1') has reduction avg");
    EXPECT_ERR(pg_allreduce(g, a, r ? PG_AVG : PG_SUM), want);
    tensor_free(a);

    /* the N4: 1000 values into 10 gave rc 0 on both */
    a = filled(DTYPE_F32, 1, (int64_t[]){r ? 10 : 1000}, r);
    snprintf(want, sizeof want, "pg_broadcast: %sf32[1000], rank 1 (worker 'w1') has f32[10]", P);
    EXPECT_ERR(pg_broadcast(g, a, 0), want);
    if (!intact(a, r)) return FAIL("broadcast: the tensor changed");
    tensor_free(a);

    a = filled(DTYPE_F32, 2, r ? (int64_t[]){4, 3} : (int64_t[]){3, 4}, r);
    snprintf(want, sizeof want, "pg_broadcast: %sf32[3,4], rank 1 (worker 'w1') has f32[4,3]", P);
    EXPECT_ERR(pg_broadcast(g, a, 0), want);
    snprintf(want, sizeof want, "pg_broadcast: group 'g': rank 0 (worker 'w0') has root 0, "
             "rank 1 (worker 'w1') has root 1");
    EXPECT_ERR(pg_broadcast(g, a, r), want);
    tensor_free(a);

    a = filled(DTYPE_F32, 1, (int64_t[]){r ? 12 : 1000}, r);
    b = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){2 * a->numel});
    snprintf(want, sizeof want, "pg_allgather: %sf32[1000], rank 1 (worker 'w1') has f32[12]", P);
    EXPECT_ERR(pg_allgather(g, a, b), want);
    tensor_free(a);
    tensor_free(b);

    /* two different collectives at once */
    a = filled(DTYPE_F32, 1, (int64_t[]){4}, r);
    snprintf(want, sizeof want, "%s: group 'g': rank 0 (worker 'w0') is in pg_allreduce, "
             "rank 1 (worker 'w1') is in pg_barrier", r ? "pg_barrier" : "pg_allreduce");
    EXPECT_ERR(r ? pg_barrier(g) : pg_allreduce(g, a, PG_SUM), want);
    tensor_free(a);

    /* the group is still whole */
    a = filled(DTYPE_F32, 1, (int64_t[]){1000}, r);
    if (pg_allreduce(g, a, PG_SUM) != 0) return FAIL("allreduce after the mismatches: %s", pg_last_error());
    for (int64_t i = 0; i < 1000; i++)
        if (pc_load(a, i) != (double)(pc_value(0, i) + pc_value(1, i))) return FAIL("allreduce element %lld", (long long)i);
    tensor_free(a);
    return pg_barrier(g) ? FAIL("barrier: %s", pg_last_error()) : 0;
}

static int child_mismatch(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    char why[2048];
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    int rc = g ? mismatches(g, rank, why, sizeof why) : (snprintf(why, sizeof why, "%s", pg_last_error()), -1);
    if (rc) fprintf(stderr, "w%d: %s\n", rank, why);
    pg_free(g);
    rpc_shutdown(true);
    return rc ? 11 : 0;
}

START_TEST(test_mismatched_collectives_fail_on_every_member)
{
    dh_extra_register = register_pg;
    dh_start(2, child_mismatch, NULL);
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    char why[2048];
    ck_assert_msg(mismatches(g, 0, why, sizeof why) == 0, "w0: %s", why);
    pg_free(g);
    dh_stop();   /* w1 exited 0: it ran the same checks and is alive */
}
END_TEST

/* ---- N4: DDP compares parameters ---------------------------------------------------------- */

static int ddp_mismatches(struct process_group *g, int r, char *why, size_t cap)
{
    uint64_t rng = 7 + (uint64_t)r;
    struct nn_module *m = nn_linear_new(16, r ? 9 : 8, true, &rng);
    EXPECT_ERR(ddp_new(m, g, 0) != NULL ? 0 : -1,
               "ddp_new: group 'g': parameter 0: rank 0 (worker 'w0') has f32[8,16], rank 1 (worker 'w1') has f32[9,16]");
    nn_module_free(m);

    m = nn_linear_new(16, 8, r == 0, &rng);
    EXPECT_ERR(ddp_new(m, g, 0) != NULL ? 0 : -1,
               "ddp_new: group 'g': rank 0 (worker 'w0') has 2 parameters, rank 1 (worker 'w1') has 1");
    nn_module_free(m);

    /* matching replicas: rank 0's values reach rank 1 */
    m = nn_linear_new(16, 8, true, &rng);
    struct ddp *d = ddp_new(m, g, 0);
    if (!d) return FAIL("ddp_new of matching replicas: %s", pg_last_error());
    int64_t n = 8 * 16 * 2;
    struct tensor *w = m->params[0], *all = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &n);
    int rc = pg_allgather(g, w, all) ? FAIL("allgather: %s", pg_last_error()) : 0;
    if (rc == 0 && memcmp(tensor_f32(all), tensor_f32(all) + 128, 128 * sizeof(float)))
        rc = FAIL("the replicas differ after ddp_new");
    tensor_free(all);
    ddp_free(d);
    nn_module_free(m);
    return rc;
}

static int child_ddp(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    char why[2048];
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    int rc = g ? ddp_mismatches(g, rank, why, sizeof why) : (snprintf(why, sizeof why, "%s", pg_last_error()), -1);
    if (rc) fprintf(stderr, "w%d: %s\n", rank, why);
    pg_free(g);
    rpc_shutdown(true);
    return rc ? 11 : 0;
}

START_TEST(test_ddp_compares_parameter_shapes)
{
    dh_extra_register = register_pg;
    dh_start(2, child_ddp, NULL);
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    char why[2048];
    ck_assert_msg(ddp_mismatches(g, 0, why, sizeof why) == 0, "w0: %s", why);
    pg_free(g);
    dh_stop();
}
END_TEST

/* ---- N2: a non-member cannot join a group's rendezvous -------------------------------------- */

/* The members' allreduce: w0 gives 1, w1 gives 10; both must get 11. */
static int sum_is_eleven(struct process_group *g, int r, char *why, size_t cap)
{
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){1});
    tensor_f32(t)[0] = r ? 10.0f : 1.0f;
    int rc = pg_allreduce(g, t, PG_SUM) ? FAIL("allreduce: %s", pg_last_error()) : 0;
    if (rc == 0 && tensor_f32(t)[0] != 11.0f) rc = FAIL("allreduce gave %g, expected 11", tensor_f32(t)[0]);
    tensor_free(t);
    return rc;
}

/* w2, outside group g = (w0, w1): tries to take rank 1's place through
 * the public API while w0 waits in pg_new, then raw store calls; then
 * lets w1 in. */
static int intruder(char *why, size_t cap)
{
    struct process_group *h = pg_new("g", 2, (const char *const[]){"w0", "w2"}, 5000);
    if (h) {   /* the hijack of the issue: give w0 our 1000 */
        struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){1});
        tensor_f32(t)[0] = 1000.0f;
        pg_allreduce(h, t, PG_SUM);
        tensor_free(t);
        pg_free(h);
        tell("w1");
        return FAIL("a non-member joined group 'g'");
    }
    if (strcmp(pg_last_error(), "pg_new: group 'g': rpc: w0: pg._store_join: worker 'w2' is not a member of group 'g'")) {
        tell("w1");
        return FAIL("pg_new: '%s'", pg_last_error());
    }
#define SET1(e, c) raw_store("w0", "g", "1", 100, e, c)
#define GET0(e, c) raw_store("w0", "g", "0", -1, e, c)
    EXPECT_RAW(SET1, "rpc: w0: pg._store_set: worker 'w2' is not a member of group 'g'");
    EXPECT_RAW(GET0, "rpc: w0: pg._store_get: worker 'w2' is not a member of group 'g'");
    return tell("w1") ? FAIL("t.go: %s", rpc_last_error()) : 0;
}

static int child_hijack(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    char why[2048] = "";
    const size_t cap = sizeof why;
    int rc = 0;
    if (rank == 2) {
        rc = intruder(why, cap);
    } else {   /* w1: comes once the intruder is done; first with another member list */
        if (wait_go(1)) {
            rc = FAIL("never told to go");
        } else if (pg_new("g", 3, (const char *const[]){"w0", "w1", "w2"}, GROUP_TIMEOUT_MS) ||
                   strcmp(pg_last_error(), "pg_new: group 'g': rpc: w0: pg._store_join: group 'g' lists "
                                           "[w0, w1] here, the caller [w0, w1, w2]")) {
            rc = FAIL("pg_new with a third member: '%s'", pg_last_error());
        } else {
            struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
            rc = g ? sum_is_eleven(g, 1, why, cap) : FAIL("pg_new: %s", pg_last_error());
            pg_free(g);
        }
    }
    if (rc) fprintf(stderr, "w%d: %s\n", rank, why);
    rpc_shutdown(true);
    return rc ? 11 : 0;
}

START_TEST(test_non_member_cannot_take_a_place)
{
    dh_extra_register = register_pg;
    dh_start(3, child_hijack, NULL);
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    char why[2048];
    ck_assert_msg(sum_is_eleven(g, 0, why, sizeof why) == 0, "w0: %s", why);
    ck_assert_ptr_null(pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS));
    ck_assert_str_eq(pg_last_error(), "pg_new: group 'g': a group of that name is alive here already");
    pg_free(g);
    /* freed: the store hosts it no more */
    char err[640];
    ck_assert_int_eq(raw_store("w0", "g", "0", 10, err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w0: pg._store_set: group 'g' is not hosted here");
    dh_stop();
}
END_TEST

/* ---- N3: junk in the store ----------------------------------------------------------------- */

/* w2 (not a member) before group g exists on w0: a junk key of every kind
 * and 64 MiB, all refused; then lets w0 and w1 make the group. Once it
 * exists (second go), the same again as a non-member. */
static int junk_writer(char *why, size_t cap)
{
    static const char *const KEYS[] = {"0", "1", "junk", "nccl_id.2"};
    char err[640];
    for (int i = 0; i < 4; i++)
        if (raw_store("w0", "g", KEYS[i], 1000, err, sizeof err) == 0 ||
            strcmp(err, "rpc: w0: pg._store_set: group 'g' is not hosted here"))
            return FAIL("junk key '%s' before the group: '%s'", KEYS[i], err);
    for (int i = 0; i < 64; i++) {
        char key[32];
        snprintf(key, sizeof key, "fill%d", i);
        if (raw_store("w0", key, "0", 1 << 20, err, sizeof err) == 0 ||
            !strstr(err, "is not hosted here"))
            return FAIL("1 MiB under group '%s': '%s'", key, err);
    }
    if (tell("w0") || tell("w1")) return FAIL("t.go: %s", rpc_last_error());
    if (wait_go(1)) return FAIL("never told the group is made");
    for (int i = 0; i < 4; i++)
        if (raw_store("w0", "g", KEYS[i], 1000, err, sizeof err) == 0 ||
            strcmp(err, "rpc: w0: pg._store_set: worker 'w2' is not a member of group 'g'"))
            return FAIL("junk key '%s' in the group: '%s'", KEYS[i], err);
    return tell("w0") ? FAIL("t.go: %s", rpc_last_error()) : 0;
}

/* A member's own junk: w1 on w0's store, w0 on its own. */
static int member_junk(int r, char *why, size_t cap)
{
#define W1_JUNK(e, c) raw_store("w0", "g", "junk", 10, e, c)
#define W1_RANK0(e, c) raw_store("w0", "g", "0", 10, e, c)
#define W1_BIG(e, c) raw_store("w0", "g", "1", 1 << 20, e, c)
#define W1_AGAIN(e, c) raw_store("w0", "g", "1", 10, e, c)
#define W1_NCCL(e, c) raw_store("w0", "g", "nccl_id.1", 128, e, c)
#define W1_RANK9(e, c) raw_store("w0", "g", "9", 10, e, c)
#define W0_NCCL_BIG(e, c) raw_store("w0", "g", "nccl_id.1", 1000, e, c)
    if (r == 1) {
        EXPECT_RAW(W1_JUNK, "rpc: w0: pg._store_set: group 'g': 'junk' is not a rendezvous key");
        EXPECT_RAW(W1_RANK0, "rpc: w0: pg._store_set: group 'g': key '0' belongs to rank 0 (worker 'w0'), not to 'w1'");
        EXPECT_RAW(W1_RANK9, "rpc: w0: pg._store_set: group 'g': key '9' names no rank of the group (2 members)");
        EXPECT_RAW(W1_NCCL, "rpc: w0: pg._store_set: group 'g': key 'nccl_id.1' belongs to rank 0 (worker 'w0'), "
                            "not to 'w1'");
        EXPECT_RAW(W1_BIG, "rpc: w0: pg._store_set: group 'g': key '1' has 1048576 bytes, over its bound of 512");
        EXPECT_RAW(W1_AGAIN, "rpc: w0: pg._store_set: group 'g': key '1' is set already");
        return 0;
    }
    EXPECT_RAW(W0_NCCL_BIG, "rpc: w0: pg._store_set: group 'g': key 'nccl_id.1' has 1000 bytes, over its bound of 128");
    char err[640], key[32];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "nccl_id.%d", 1000 + i);
        if (raw_store("w0", "g", key, 128, err, sizeof err)) return FAIL("%s: %s", key, err);
    }
#define W0_NCCL_MORE(e, c) raw_store("w0", "g", "nccl_id.2000", 128, e, c)
    EXPECT_RAW(W0_NCCL_MORE, "rpc: w0: pg._store_set: group 'g': holds 4 'nccl_id' keys already, the bound");
    return 0;
}

static int child_junk(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    char why[2048] = "";
    const size_t cap = sizeof why;
    int rc = 0;
    if (rank == 2) {
        rc = junk_writer(why, cap);
    } else if (wait_go(1)) {
        rc = FAIL("never told to go");
    } else {
        struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
        rc = g ? sum_is_eleven(g, 1, why, cap) : FAIL("pg_new: %s", pg_last_error());
        if (rc == 0) rc = member_junk(1, why, cap);
        if (rc == 0 && pg_barrier(g)) rc = FAIL("barrier: %s", pg_last_error());
        pg_free(g);
    }
    if (rc) fprintf(stderr, "w%d: %s\n", rank, why);
    rpc_shutdown(true);
    return rc ? 11 : 0;
}

START_TEST(test_store_refuses_junk_within_bounds)
{
    dh_extra_register = register_pg;
    dh_start(3, child_junk, NULL);
    char why[2048];
    ck_assert_msg(wait_go(1) == 0, "w2 never finished its first round");
    struct process_group *g = pg_new("g", 2, PAIR, GROUP_TIMEOUT_MS);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    ck_assert_msg(sum_is_eleven(g, 0, why, sizeof why) == 0, "w0: %s", why);
    ck_assert_msg(member_junk(0, why, sizeof why) == 0, "w0: %s", why);
    ck_assert_int_eq(tell("w2"), 0);
    ck_assert_msg(wait_go(2) == 0, "w2 never finished its second round");
    ck_assert_int_eq(pg_barrier(g), 0);
    pg_free(g);
    dh_stop();
}
END_TEST

KIT_MAIN("pg_hostile",
         { "hostile", 240, .tests = { test_mismatched_collectives_fail_on_every_member,
           test_ddp_compares_parameter_shapes, test_non_member_cannot_take_a_place,
           test_store_refuses_junk_within_bounds } })
