/* RemoteModule (PyTorch's torch.distributed.nn.RemoteModule example): a
 * Linear(20, 30) built on worker1 and called from worker0, with forward and
 * forward_async, then trained from worker0 for a few steps with distributed
 * autograd and the distributed optimizer over its remote parameters.
 * Run: ./remote_module (forks both workers on loopback). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tributary.h"

enum { IN = 20, OUT = 30, BATCH = 128, STEPS = 60 };

/* xorshift64* uniform in [-1, 1): data and a teacher network for the targets */
static float uniform(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static struct tensor *random_tensor(int64_t rows, int64_t cols, uint64_t *s)
{
    int64_t shape[2] = { rows, cols };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    float *d = tensor_f32(t);
    for (int64_t i = 0; i < rows * cols; i++) d[i] = uniform(s);
    return t;
}

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "worker0: %s: %s\n", what, err);
    return 1;
}

static int drive(void)
{
    /* RemoteModule("worker1/cpu", nn.Linear, args=(20, 30)) */
    struct rpc_value args = rpc_list(2);
    args.list.items[0] = rpc_int(IN);
    args.list.items[1] = rpc_int(OUT);
    struct remote_module *rm = remote_module_new_at("worker1/cpu", "linear", &args);
    rpc_value_clear(&args);
    if (!rm) return fail("remote_module_new_at", rpc_last_error());

    uint64_t rng = 42;
    struct tensor *x = random_tensor(BATCH, IN, &rng);
    struct tensor *out[NN_MAX_IO];
    int n_out = 0;
    if (remote_module_forward(rm, 1, &x, &n_out, out) != 0) return fail("forward", rpc_last_error());
    struct tensor *y1 = out[0];
    struct rpc_future *f = remote_module_forward_async(rm, 1, &x);
    if (remote_module_forward_wait(f, &n_out, out) != 0) return fail("forward_async", rpc_last_error());
    rpc_future_free(f);
    char shape[32];
    printf("forward: %s on worker%d\n", shape_str(y1->ndim, y1->shape, shape, sizeof shape),
           rref_owner(remote_module_rref(rm)));
    printf("forward_async equals forward: %s\n",
           memcmp(tensor_f32(y1), tensor_f32(out[0]), tensor_nbytes(y1)) == 0 ? "yes" : "no");
    tensor_free(out[0]);
    tensor_free(y1);

    /* Fit the remote Linear to a teacher Linear: dist autograd + dist optimizer. */
    struct tensor *w_teacher = random_tensor(OUT, IN, &rng);
    struct tensor *target = tensor_linear(x, w_teacher, NULL);
    struct rref *params[4];
    int np = remote_module_parameters(rm, params, 4);
    if (np < 0) return fail("remote_parameters", rpc_last_error());
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 0.5;
    h.momentum = 0.9;
    struct dist_optim *opt = dist_optim_new(OPTIM_SGD, &h, np, params);
    if (!opt) return fail("dist_optim_new", rpc_last_error());
    int rc = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *loss = NULL;
        rc = remote_module_forward(rm, 1, &x, &n_out, out);
        if (rc == 0) {
            loss = tensor_mse(out[0], target);
            tensor_free(out[0]);
        }
        if (rc == 0 && !loss) rc = fail("mse", tensor_last_error());
        if (rc == 0 && dist_autograd_backward(ctx, 1, &loss, false) != 0) rc = fail("backward", rpc_last_error());
        if (rc == 0 && dist_optim_step(opt, ctx) != 0) rc = fail("step", rpc_last_error());
        if (rc == 0 && (step % 10 == 0 || step == STEPS - 1))
            printf("step %2d loss %.6f\n", step, tensor_f32(loss)[0]);
        tensor_free(loss);
        dist_autograd_release(ctx);
    }
    dist_optim_free(opt);
    for (int i = 0; i < np; i++) rref_free(params[i]);
    tensor_free(target);
    tensor_free(w_teacher);
    tensor_free(x);
    remote_module_free(rm);
    return rc;
}

static int worker(int rank, int world_size, const char *master, void *arg)
{
    (void)arg;
    dist_autograd_init();
    remote_module_init();
    dist_optim_init();
    char name[16];
    snprintf(name, sizeof name, "worker%d", rank);
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world_size, .master = master };
    if (rpc_init(&o) != 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", name, rpc_last_error());
        return 1;
    }
    int rc = rank == 0 ? drive() : 0;   /* worker1 only serves */
    rpc_shutdown(true);
    return rc;
}

int main(void)
{
    if (rpc_spawn(2, worker, NULL, 120) != 0) {
        fprintf(stderr, "remote_module: %s\n", rpc_last_error());
        return 1;
    }
    return 0;
}
