/* Remote devices (rpc/placement.h) and rpc_spawn: placements parse as
 * PyTorch writes them, an unknown worker or device is refused with an
 * exact message, remote_module_new_at and rpc_tensor_to put the module or
 * the tensor's copy on the named worker; rpc_spawn names the rank that
 * failed. (The cuda:0 path on a GPU: test_dist_cuda.) */
#include "dist_harness.h"
#include "kit.h"

START_TEST(parse)
{
    struct placement p;
    ck_assert_int_eq(placement_parse("worker1/cpu", &p), 0);
    ck_assert_str_eq(p.worker, "worker1");
    ck_assert_int_eq(p.device, DEVICE_CPU);
    ck_assert_int_eq(placement_parse("worker1", &p), 0);
    ck_assert_int_eq(p.device, DEVICE_CPU);
    ck_assert_int_eq(placement_parse("w/cuda:3", &p), 0);
    ck_assert_int_eq(p.device, DEVICE_CUDA);
    ck_assert_int_eq(p.index, 3);
    ck_assert_int_eq(placement_parse("w/cuda", &p), 0);
    ck_assert_int_eq(p.index, 0);
    ck_assert_int_eq(placement_parse("/cpu", &p), -1);
    ck_assert_str_eq(rpc_last_error(), "placement '/cpu': no worker name");
    ck_assert_int_eq(placement_parse("", &p), -1);
    ck_assert_str_eq(rpc_last_error(), "placement '': no worker name");
    const char *bad[] = { "w1/gpu", "w1/cuda:", "w1/cuda:x", "w1/cuda:-1", "w1/cuda:1x", "w1/", "w1/cpu/0" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[128];
        snprintf(want, sizeof want, "placement '%s': unknown device '%s' (expected cpu or cuda:N)", bad[i],
                 strchr(bad[i], '/') + 1);
        ck_assert_int_eq(placement_parse(bad[i], &p), -1);
        ck_assert_str_eq(rpc_last_error(), want);
    }
}
END_TEST

START_TEST(resolve_and_place)
{
    dh_start(2, NULL, NULL);
    struct placement p;
    ck_assert_int_eq(placement_resolve("w1/cpu", &p), 0);
    ck_assert_int_eq(placement_resolve("nobody/cpu", &p), -1);
    ck_assert_str_eq(rpc_last_error(), "placement 'nobody/cpu': unknown worker 'nobody'");
    ck_assert_int_eq(placement_resolve("w1/cuda:1", &p), -1);
    ck_assert_str_eq(rpc_last_error(), "placement 'w1/cuda:1': only cuda:0 is supported (one CUDA device per "
                                       "worker process: choose its GPU with CUDA_VISIBLE_DEVICES)");
    if (!tensor_cuda_available()) {   /* w1 runs on this machine: it has none either */
        ck_assert_int_eq(placement_resolve("w1/cuda:0", &p), -1);
        ck_assert_str_eq(rpc_last_error(), "placement 'w1/cuda:0': w1 has no CUDA device");
        ck_assert_ptr_null(remote_module_new_at("w1/cuda:0", "linear", NULL));
        ck_assert_str_eq(rpc_last_error(), "placement 'w1/cuda:0': w1 has no CUDA device");
    }

    /* RemoteModule("w1/cpu", Linear(3, 2)) lives on w1 and computes there. */
    struct rpc_value a = rpc_list(2);
    a.list.items[0] = rpc_int(3);
    a.list.items[1] = rpc_int(2);
    struct remote_module *rm = remote_module_new_at("w1/cpu", "linear", &a);
    ck_assert_msg(rm != NULL, "%s", rpc_last_error());
    ck_assert_int_eq(rref_owner(remote_module_rref(rm)), 1);
    struct tensor *x = dh_random(4, 3, 5), *out[NN_MAX_IO];
    int n = 0;
    ck_assert_int_eq(remote_module_forward(rm, 1, &x, &n, out), 0);
    ck_assert_int_eq(out[0]->shape[0], 4);
    ck_assert_int_eq(out[0]->shape[1], 2);
    tensor_free(out[0]);
    remote_module_free(rm);
    ck_assert_ptr_null(remote_module_new_at("nobody/cpu", "linear", &a));
    ck_assert_str_eq(rpc_last_error(), "placement 'nobody/cpu': unknown worker 'nobody'");
    ck_assert_ptr_null(remote_module_new_at("w1/npu", "linear", &a));
    ck_assert_str_eq(rpc_last_error(), "placement 'w1/npu': unknown device 'npu' (expected cpu or cuda:N)");
    rpc_value_clear(&a);

    /* A tensor moved to w1: an RRef owned there holding an equal copy. */
    tensor_set_requires_grad(x, true);
    struct rref *r = rpc_tensor_to("w1/cpu", x);
    ck_assert_msg(r != NULL, "%s", rpc_last_error());
    ck_assert_int_eq(rref_owner(r), 1);
    ck_assert(!rref_is_owner(r));
    struct rpc_value v = rpc_nil();
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);
    ck_assert_int_eq(v.kind, RPC_TENSOR);
    ck_assert(tensor_same_shape(v.tensor, x));
    ck_assert_mem_eq(tensor_f32(v.tensor), tensor_f32(x), tensor_nbytes(x));
    ck_assert(!v.tensor->requires_grad);
    rpc_value_clear(&v);
    rref_free(r);
    r = rpc_tensor_to("w0", x);   /* to itself: an owner RRef */
    ck_assert_msg(r != NULL && rref_is_owner(r), "%s", rpc_last_error());
    rref_free(r);
    ck_assert_ptr_null(rpc_tensor_to("w9/cpu", x));
    ck_assert_str_eq(rpc_last_error(), "rpc_tensor_to: placement 'w9/cpu': unknown worker 'w9'");
    ck_assert_ptr_null(rpc_tensor_to("w1/tpu:0", x));
    ck_assert_str_eq(rpc_last_error(), "rpc_tensor_to: placement 'w1/tpu:0': unknown device 'tpu:0' (expected cpu or cuda:N)");
    tensor_free(x);
    dh_stop();
}
END_TEST

/* ---- rpc_spawn ----------------------------------------------------------------- */

static int spawn_body(int rank, int world, const char *master, void *arg)
{
    int mode = *(int *)arg;
    if (mode == 0) {   /* a real world: rank 0 calls every other rank */
        struct rpc_opts o = { .name = DH_NAMES[rank], .rank = rank, .world_size = world, .master = master };
        if (rpc_init(&o) != 0) return 10;
        int rc = 0;
        for (int r = 1; rank == 0 && r < world; r++) {
            struct rpc_worker_info info;
            if (rpc_get_worker_info(DH_NAMES[r], &info) != 0 || info.id != r) rc = 11;
        }
        rpc_shutdown(true);
        return rc;
    }
    if (mode == 1) return rank == 2 ? 3 : 0;
    if (mode == 2 && rank == 1) raise(SIGKILL);
    if (mode == 3 && rank == 0) sleep(30);
    return 0;
}

START_TEST(spawn)
{
    int mode = 0;
    ck_assert_msg(rpc_spawn(3, spawn_body, &mode, 60) == 0, "%s", rpc_last_error());
    mode = 1;
    ck_assert_int_eq(rpc_spawn(3, spawn_body, &mode, 60), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_spawn: rank 2 exited 3");
    mode = 2;
    ck_assert_int_eq(rpc_spawn(2, spawn_body, &mode, 60), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_spawn: rank 1 killed by signal 9 (Killed)");
    mode = 3;
    double t0 = trib_now_s();
    ck_assert_int_eq(rpc_spawn(2, spawn_body, &mode, 0.5), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_spawn: rank 0 still running after 0.5 s");
    ck_assert(trib_now_s() - t0 < 10);   /* killed, not waited for */
    ck_assert_int_eq(rpc_spawn(0, spawn_body, &mode, 1), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_spawn: world size 0 is not in 1..64");
}
END_TEST

KIT_MAIN("placement",
         { "placement", 120, .tests = { parse, resolve_and_place, spawn } })
