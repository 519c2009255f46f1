/* Process groups on CUDA tensors (NCCL): skips (77) without a GPU or in a
 * build without NCCL. NCCL refuses two ranks on one GPU, so this runs a
 * group of one, which works on any GPU machine: the NCCL path
 * (communicator made through the RPC store, allreduce sum and average,
 * broadcast, a dtype refused by name) with the values checked against the
 * CPU. Groups of several GPUs are not tested here. */
#include "../dist/dist_harness.h"
#include "pg/process_group.h"

static void register_pg(void) { pg_init(); }

START_TEST(test_nccl_group_of_one)
{
    dh_extra_register = register_pg;
    dh_start(1, NULL, NULL);
    const char *const ws[] = {"w0"};
    struct process_group *g = pg_new("gpu", 1, ws, 20000);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    int64_t n = 100003;
    struct tensor *h = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &n);
    for (int64_t i = 0; i < n; i++) tensor_f32(h)[i] = (float)(i % 97) - 3.0f;
    struct tensor *d = tensor_clone_to(h, DEVICE_CUDA);
    ck_assert_ptr_nonnull(d);
    ck_assert_msg(pg_allreduce(g, d, PG_SUM) == 0, "%s", pg_last_error());
    ck_assert_msg(pg_allreduce(g, d, PG_AVG) == 0, "%s", pg_last_error());
    ck_assert_msg(pg_broadcast(g, d, 0) == 0, "%s", pg_last_error());
    struct tensor *back = tensor_clone_to(d, DEVICE_CPU);
    ck_assert_int_eq(memcmp(tensor_data(back), tensor_data(h), (size_t)n * sizeof(float)), 0);
    struct tensor *di = tensor_new(DTYPE_I64, DEVICE_CUDA, 1, (int64_t[]){5});
    ck_assert_int_eq(pg_allreduce(g, di, PG_AVG), -1);
    ck_assert_str_eq(pg_last_error(), "pg_allreduce: group 'gpu': an average needs a floating dtype, not i64");
    ck_assert_msg(pg_allreduce(g, di, PG_SUM) == 0, "%s", pg_last_error());
    struct tensor *all[] = {h, d, back, di};
    for (int i = 0; i < 4; i++) tensor_free(all[i]);
    pg_free(g);
    dh_stop();
}
END_TEST

int main(void)
{
    if (!tensor_cuda_available()) {
        printf("test_pg_cuda: no CUDA device, skipped\n");
        return 77;
    }
    if (!pg_has_nccl()) {
        printf("test_pg_cuda: built without NCCL, skipped\n");
        return 77;
    }
    Suite *s = suite_create("pg_cuda");
    TCase *tc = tcase_create("nccl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_nccl_group_of_one);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
