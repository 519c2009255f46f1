/* Parameter server (the shape of PyTorch's tutorial "Implementing a
 * Parameter Server Using Distributed RPC Framework"): worker "ps" owns the
 * model, an MLP 4-32-3 classifier built on first request behind a lock;
 * two trainers fetch its RRef, run the forward on the PS, compute the
 * cross-entropy locally, and train with distributed autograd and a
 * distributed optimizer each of their own over the PS's parameters.
 * Run: ./parameter_server (forks ps, trainer1 and trainer2 on loopback). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tributary.h"

enum { TRAINERS = 2, IN = 4, HIDDEN = 32, CLASSES = 3, N = 192, BATCH = 32, EPOCHS = 8 };

/* ---- the parameter server ---------------------------------------------------- */

static pthread_mutex_t ps_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ps_cv = PTHREAD_COND_INITIALIZER;
static struct remote_module *ps_model;   /* built by the first ps.get_model */
static int ps_done;                      /* trainers finished */

/* ps.get_model() -> RRef of the model (get_parameter_server() in the tutorial) */
static int ps_get_model(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&ps_mu);
    if (!ps_model) {
        struct rpc_value a = rpc_list(2), sizes = rpc_list(3);
        sizes.list.items[0] = rpc_int(IN);
        sizes.list.items[1] = rpc_int(HIDDEN);
        sizes.list.items[2] = rpc_int(CLASSES);
        a.list.items[0] = sizes;
        a.list.items[1] = rpc_str("relu");
        ps_model = remote_module_new_at("ps/cpu", "mlp", &a);
        rpc_value_clear(&a);
    }
    int rc = ps_model ? 0 : rpc_request_fail(req, "%s", rpc_last_error());
    if (ps_model) *res = rpc_rref(remote_module_rref(ps_model));
    pthread_mutex_unlock(&ps_mu);
    return rc;
}

/* ps.done(): a trainer has finished. */
static int ps_trainer_done(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&ps_mu);
    ps_done++;
    pthread_cond_signal(&ps_cv);
    pthread_mutex_unlock(&ps_mu);
    return 0;
}

static int run_ps(void)
{
    pthread_mutex_lock(&ps_mu);
    while (ps_done < TRAINERS) pthread_cond_wait(&ps_cv, &ps_mu);
    pthread_mutex_unlock(&ps_mu);
    printf("ps: %d trainers done, %lld optimizer steps applied\n", TRAINERS, (long long)dist_optim_local_version());
    remote_module_free(ps_model);
    return 0;
}

/* ---- a trainer --------------------------------------------------------------------- */

static float uniform(uint64_t *s)   /* xorshift64*, [-1, 1) */
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* N points around three class centres; each trainer draws its own. */
static void make_data(uint64_t seed, struct tensor **x, struct tensor **y)
{
    static const float centre[CLASSES][IN] = { { 1, 1, 0, 0 }, { -1, 0, 1, 0 }, { 0, -1, -1, 1 } };
    int64_t xs[2] = { N, IN }, ys[2] = { N, 1 };
    *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, xs);
    *y = tensor_new(DTYPE_I64, DEVICE_CPU, 2, ys);
    float *xd = tensor_f32(*x);
    int64_t *yd = tensor_data(*y);
    for (int i = 0; i < N; i++) {
        int c = i % CLASSES;
        yd[i] = c;
        for (int j = 0; j < IN; j++) xd[i * IN + j] = centre[c][j] + 0.6f * uniform(&seed);
    }
}

/* -mean(log_softmax(logits)[label]) */
static struct tensor *cross_entropy(struct tensor *logits, struct tensor *labels)
{
    struct tensor *lp = tensor_log_softmax(logits);
    struct tensor *picked = lp ? tensor_gather(lp, labels) : NULL;
    struct tensor *mean = picked ? tensor_mean(picked) : NULL;
    struct tensor *loss = mean ? tensor_neg(mean) : NULL;
    tensor_free(lp);
    tensor_free(picked);
    tensor_free(mean);
    return loss;
}

static int trainer_fail(const char *what, const char *err)
{
    fprintf(stderr, "%s: %s: %s\n", rpc_self()->name, what, err);
    return 1;
}

static int run_trainer(int rank)
{
    const char *me = rpc_self()->name;
    struct rpc_value m = rpc_nil();
    if (rpc_sync("ps", "ps.get_model", NULL, &m, 0) != 0) return trainer_fail("ps.get_model", rpc_last_error());
    struct remote_module *model = remote_module_from_rref(m.rref);
    rpc_value_clear(&m);
    struct rref *params[16];
    int np = remote_module_parameters(model, params, 16);
    if (np < 0) return trainer_fail("parameters", rpc_last_error());
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 0.05;
    h.momentum = 0.9;
    struct dist_optim *opt = dist_optim_new(OPTIM_SGD, &h, np, params);
    if (!opt) return trainer_fail("dist_optim_new", rpc_last_error());

    struct tensor *x, *y;
    make_data(0x9e3779b97f4a7c15ull * (uint64_t)rank, &x, &y);
    int rc = 0;
    for (int epoch = 0; epoch < EPOCHS && rc == 0; epoch++) {
        double total = 0;
        for (int b = 0; b < N / BATCH && rc == 0; b++) {
            struct tensor *xb = tensor_slice(x, b * BATCH, (b + 1) * BATCH);
            struct tensor *yb = tensor_slice(y, b * BATCH, (b + 1) * BATCH);
            int64_t ctx = dist_autograd_context_new();
            struct tensor *out[NN_MAX_IO], *loss = NULL;
            int n_out;
            if (remote_module_forward(model, 1, &xb, &n_out, out) != 0) {
                rc = trainer_fail("forward", rpc_last_error());
            } else {
                loss = cross_entropy(out[0], yb);
                tensor_free(out[0]);
                if (!loss) rc = trainer_fail("loss", tensor_last_error());
            }
            if (rc == 0 && dist_autograd_backward(ctx, 1, &loss, false) != 0) rc = trainer_fail("backward", rpc_last_error());
            if (rc == 0 && dist_optim_step(opt, ctx) != 0) rc = trainer_fail("step", rpc_last_error());
            if (rc == 0) total += tensor_f32(loss)[0];
            dist_autograd_release(ctx);
            tensor_free(loss);
            tensor_free(xb);
            tensor_free(yb);
        }
        if (rc == 0) printf("%s epoch %d loss %.4f\n", me, epoch, total / (N / BATCH));
    }
    if (rc == 0) {   /* accuracy on its own data, no context: nothing recorded */
        struct tensor *out[NN_MAX_IO];
        int n_out, right = 0;
        if (remote_module_forward(model, 1, &x, &n_out, out) != 0) return trainer_fail("forward", rpc_last_error());
        const float *l = tensor_f32(out[0]);
        const int64_t *yd = tensor_data(y);
        for (int i = 0; i < N; i++) {
            int best = 0;
            for (int c = 1; c < CLASSES; c++)
                if (l[i * CLASSES + c] > l[i * CLASSES + best]) best = c;
            right += best == yd[i];
        }
        tensor_free(out[0]);
        printf("%s accuracy %.3f\n", me, (double)right / N);
    }
    dist_optim_free(opt);
    for (int i = 0; i < np; i++) rref_free(params[i]);
    remote_module_free(model);
    tensor_free(x);
    tensor_free(y);
    if (rpc_sync("ps", "ps.done", NULL, NULL, 0) != 0 && rc == 0) rc = trainer_fail("ps.done", rpc_last_error());
    return rc;
}

static int worker(int rank, int world_size, const char *master, void *arg)
{
    (void)arg;
    dist_autograd_init();
    remote_module_init();
    dist_optim_init();
    rpc_register("ps.get_model", ps_get_model, NULL);
    rpc_register("ps.done", ps_trainer_done, NULL);
    char name[16];
    if (rank == 0) snprintf(name, sizeof name, "ps");
    else snprintf(name, sizeof name, "trainer%d", rank);
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world_size, .master = master };
    if (rpc_init(&o) != 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", name, rpc_last_error());
        return 1;
    }
    int rc = rank == 0 ? run_ps() : run_trainer(rank);
    rpc_shutdown(true);
    return rc;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);   /* one line at a time from every process */
    if (rpc_spawn(1 + TRAINERS, worker, NULL, 300) != 0) {
        fprintf(stderr, "parameter_server: %s\n", rpc_last_error());
        return 1;
    }
    return 0;
}
