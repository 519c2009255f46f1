/* Process groups on CUDA tensors (NCCL): skips (77) without a GPU or in a
 * build without NCCL. NCCL refuses two ranks on one GPU, so this runs a
 * group of one, which works on any GPU machine: the NCCL path
 * (communicator made through the RPC store, allreduce sum and average,
 * broadcast, a dtype refused by name) with the values checked against the
 * CPU; DDP on a CUDA module in that group. Groups of several GPUs are not
 * tested here. */
#include "../dist/dist_harness.h"
#include "pg/ddp.h"
#include "pg/process_group.h"

static void register_pg(void)
{
    pg_init();
    ddp_init();
}

static void check_collectives(struct process_group *g)
{
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
}

/* DDP on CUDA (a group of one: its NCCL allreduce is the identity): the
 * context's gradients of a CUDA module equal a local backward's, and stay
 * on the device. */
static void check_ddp(struct process_group *g)
{
    uint64_t r1 = 9, r2 = 9;
    struct nn_module *m = nn_mlp_new(3, (const int[]){4, 16, 3}, NN_TANH, 0.0f, &r1);
    struct nn_module *ref = nn_mlp_new(3, (const int[]){4, 16, 3}, NN_TANH, 0.0f, &r2);
    ck_assert_int_eq(nn_module_to(m, DEVICE_CUDA), 0);
    ck_assert_int_eq(nn_module_to(ref, DEVICE_CUDA), 0);
    struct ddp *d = ddp_new(m, g, 64);
    ck_assert_msg(d != NULL, "%s", pg_last_error());
    struct tensor *xh = dh_random(5, 4, 3), *x = tensor_clone_to(xh, DEVICE_CUDA);
    struct tensor *th = tensor_from_data(DTYPE_I64, 1, (int64_t[]){5}, (int64_t[]){0, 2, 1, 1, 0});
    struct tensor *t = tensor_clone_to(th, DEVICE_CUDA);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *y = nn_forward1(m, x), *loss = tensor_cross_entropy(y, t);
    ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(ddp_num_reductions(d), 1);
    struct tensor *yr = nn_forward1(ref, x), *lr = tensor_cross_entropy(yr, t);
    ck_assert_int_eq(tensor_backward(lr, NULL, false), 0);
    for (int i = 0; i < m->n_params; i++) {
        struct tensor *gr = dist_autograd_get_gradient(ctx, m->params[i]);
        ck_assert_ptr_nonnull(gr);
        ck_assert_int_eq(gr->device, DEVICE_CUDA);
        struct tensor *a = tensor_clone_to(gr, DEVICE_CPU), *b = tensor_clone_to(ref->params[i]->grad, DEVICE_CPU);
        dh_assert_close(a, b, "ddp gradient on cuda");
        tensor_free(a);
        tensor_free(b);
        tensor_free(gr);
    }
    dist_autograd_release(ctx);
    struct tensor *all[] = {xh, x, th, t, y, loss, yr, lr};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
    ddp_free(d);
    nn_module_free(m);
    nn_module_free(ref);
}

START_TEST(test_nccl_group_of_one)
{
    dh_extra_register = register_pg;
    dh_start(1, NULL, NULL);
    const char *const ws[] = {"w0"};
    struct process_group *g = pg_new("gpu", 1, ws, 20000);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    check_collectives(g);
    check_ddp(g);
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
    srunner_set_fork_status(sr, CK_NOFORK);   /* CUDA is initialised in this process */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
