/* RemoteModule on a CUDA device: w0 (which checked for a device before
 * forking, so the child never touches CUDA) owns an MLP built with
 * DEVICE_CUDA; w1 drives forward and backward, and the loss, the owner's
 * parameter gradients (kept on the device) and the input gradient match the
 * same MLP run on the CPU. Skips (77) without a device. */
#include "dist_harness.h"

enum { IN = 6, HID = 16, OUT = 3, BATCH = 5 };

static bool close_enough(const struct tensor *a, const struct tensor *b, const char *what)
{
    if (!a || !b || !tensor_same_shape(a, b)) {
        fprintf(stderr, "test_dist_cuda: %s: missing or mismatched tensors\n", what);
        return false;
    }
    const float *x = tensor_f32(a), *y = tensor_f32(b);
    for (int64_t i = 0; i < a->numel; i++)
        if (!(fabs((double)x[i] - y[i]) <= 1e-4 + 1e-4 * fabs((double)y[i]))) {
            fprintf(stderr, "test_dist_cuda: %s[%lld]: %.9g vs %.9g\n", what, (long long)i, x[i], y[i]);
            return false;
        }
    return true;
}

#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "test_dist_cuda: " __VA_ARGS__);                    \
            fputc('\n', stderr);                                                \
            rc = 1;                                                             \
            goto out;                                                           \
        }                                                                       \
    } while (0)

/* The CPU-only driver (w1). */
static int drive(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    int rc = 0;
    int sizes[3] = { IN, HID, OUT };
    uint64_t rng = 11;
    struct nn_module *ref = nn_mlp_new(3, sizes, NN_TANH, 0.0f, &rng);
    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_list(3);
    for (int i = 0; i < 3; i++) a.list.items[0].list.items[i] = rpc_int(sizes[i]);
    a.list.items[1] = rpc_str("tanh");
    a.list.items[2] = rpc_double(0.0);
    a.list.items[3] = rpc_int(11);
    struct remote_module *rm = remote_module_new_at("w0/cuda:0", "mlp", &a);   /* a remote device */
    rpc_value_clear(&a);
    struct tensor *xl = dh_random(BATCH, IN, 3), *xr = dh_random(BATCH, IN, 3), *t = dh_random(BATCH, OUT, 4);
    struct tensor *yl = NULL, *ll = NULL, *out[NN_MAX_IO] = { 0 }, *rl = NULL, *gx = NULL;
    struct rref *p[8] = { 0 };
    int np = 0, n = 0;
    int64_t ctx = 0;
    EXPECT(rm != NULL, "remote_module_new_at(w0/cuda:0, mlp): %s", rpc_last_error());
    tensor_set_requires_grad(xl, true);
    tensor_set_requires_grad(xr, true);
    yl = nn_forward1(ref, xl);
    ll = tensor_mse(yl, t);
    EXPECT(tensor_backward(ll, NULL, false) == 0, "local backward: %s", tensor_last_error());

    ctx = dist_autograd_context_new();
    EXPECT(remote_module_forward(rm, 1, &xr, &n, out) == 0 && n == 1, "forward: %s", rpc_last_error());
    EXPECT(out[0]->device == DEVICE_CPU && out[0]->requires_grad, "the output is not a CPU tensor requiring grad");
    rl = tensor_mse(out[0], t);
    EXPECT(close_enough(rl, ll, "loss"), "loss differs");
    EXPECT(dist_autograd_backward(ctx, 1, &rl, false) == 0, "backward: %s", rpc_last_error());
    gx = dist_autograd_get_gradient(ctx, xr);
    EXPECT(close_enough(gx, xl->grad, "input grad"), "input grad differs");

    np = remote_module_parameters(rm, p, 8);
    EXPECT(np == ref->n_params, "%d parameter RRefs, expected %d", np, ref->n_params);
    for (int i = 0; i < np; i++) {
        struct rpc_value q = rpc_list(2), res = rpc_nil();
        q.list.items[0] = rpc_int(ctx);
        q.list.items[1] = rpc_rref(p[i]);
        EXPECT(dh_query("w0", "t.pgrad", q, &res) == 0, "t.pgrad: %s", rpc_last_error());
        bool ok = res.list.items[0].kind == RPC_TENSOR && res.list.items[1].b && res.list.items[2].i == DEVICE_CUDA &&
                  close_enough(res.list.items[0].tensor, ref->params[i]->grad, "param grad");
        int64_t dev = res.list.items[2].i;
        rpc_value_clear(&res);
        EXPECT(ok, "param %d: gradient wrong, ->grad written, or on device %lld", i, (long long)dev);
    }
    EXPECT(dist_autograd_release(ctx) == 0, "release: %s", rpc_last_error());
    ctx = 0;
    EXPECT(dist_autograd_num_contexts() == 0 && dh_remote_nctx("w0") == 0, "contexts left");
out:
    if (ctx) dist_autograd_release(ctx);
    for (int i = 0; i < np; i++) rref_free(p[i]);
    for (int i = 0; i < NN_MAX_IO; i++) tensor_free(out[i]);
    tensor_free(gx);
    tensor_free(rl);
    tensor_free(ll);
    tensor_free(yl);
    tensor_free(xl);
    tensor_free(xr);
    tensor_free(t);
    nn_module_free(ref);
    remote_module_free(rm);
    rpc_shutdown(true);
    return rc;
}

START_TEST(test_cuda_remote_module)
{
    dh_start(2, drive, NULL);
    dh_stop();          /* w1 exits 0 only if every check passed */
}
END_TEST

static Suite *dist_cuda_suite(void)
{
    Suite *s = suite_create("dist_cuda");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cuda_remote_module);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* w0 owns the CUDA module: check its device before anything forks. */
    if (!tensor_cuda_available()) {
        printf("test_dist_cuda: no CUDA device, skipping\n");
        return 77;
    }
    SRunner *sr = srunner_create(dist_cuda_suite());
    srunner_set_fork_status(sr, CK_NOFORK);   /* CUDA is initialised in this process */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
