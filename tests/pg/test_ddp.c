/* DDP over a Gloo group of three trainers (w0, w1, w2): each wraps an MLP
 * initialised from its own seed (rank 0's values are broadcast), runs a
 * distributed-autograd backward of a cross-entropy loss on its own batch,
 * and finds in its context the mean of the three local gradients (each
 * computed here with a plain local backward), bit-identical on every
 * trainer; small buckets make the reduction run in several, each started
 * while the engine was still running. Then SGD
 * through dist_optim for several steps equals one model trained locally on
 * the union of the three batches. Every process runs the same body; the
 * children report on stderr and by exit code. */
#include <pthread.h>
#include <semaphore.h>

#include "../dist/dist_harness.h"
#include "optim/optim.h"
#include "pg/ddp.h"
#include "pg/process_group.h"
#include "kit.h"

enum { IN = 5, HID = 8, CLASSES = 3, BATCH = 4, TRAINERS = 3, STEPS = 12 };
#define LR 0.1
#define BUCKET_BYTES 100   /* a few parameters per bucket */

static const char *const ALL[] = {"w0", "w1", "w2"};

static void register_pg(void)
{
    pg_init();
    ddp_init();
}

static struct nn_module *make_model(uint64_t seed)
{
    uint64_t rng = seed;
    return nn_mlp_new(3, (const int[]){IN, HID, CLASSES}, NN_TANH, 0.0f, &rng);
}

/* Trainer k's batch. */
static void batch(int k, struct tensor **x, struct tensor **y)
{
    *x = dh_random(BATCH, IN, 40 + (uint32_t)k);
    int64_t t[BATCH];
    for (int i = 0; i < BATCH; i++) t[i] = (i + k) % CLASSES;
    *y = tensor_from_data(DTYPE_I64, 1, (int64_t[]){BATCH}, t);
}

static struct tensor *loss_of(struct nn_module *m, int k)
{
    struct tensor *x, *y;
    batch(k, &x, &y);
    struct tensor *logits = nn_forward1(m, x);
    struct tensor *loss = tensor_cross_entropy(logits, y);
    tensor_free(x);
    tensor_free(y);
    tensor_free(logits);
    return loss;
}

#define FAIL(...) (snprintf(why, cap, __VA_ARGS__), -1)

/* Backward in a context; the context's gradients must be the mean of the
 * trainers' local gradients and the same bits on every trainer. */
static int check_gradients(struct ddp *d, struct process_group *g, char *why, size_t cap)
{
    struct nn_module *m = ddp_module(d);
    int r = pg_rank(g);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *loss = loss_of(m, r);
    int rc = dist_autograd_backward(ctx, 1, &loss, false);
    tensor_free(loss);
    if (rc) return FAIL("backward: %s", rpc_last_error());
    if (ddp_num_reductions(d) != 1) return FAIL("%lld reductions, expected 1", (long long)ddp_num_reductions(d));
    /* every bucket's gradients were complete before the engine finished: all started early */
    if (ddp_num_early_buckets(d) != ddp_num_buckets(d))
        return FAIL("%lld of %d buckets started during the backward", (long long)ddp_num_early_buckets(d),
                    ddp_num_buckets(d));

    /* the local gradient of every trainer's batch, on a copy of the replica */
    struct nn_module *ref = make_model(100);   /* rank 0's initial values: the broadcast ones */
    struct tensor **local = calloc((size_t)(TRAINERS * m->n_params), sizeof *local);
    for (int k = 0; k < TRAINERS; k++) {
        for (int i = 0; i < ref->n_params; i++) tensor_zero_grad(ref->params[i]);
        struct tensor *l = loss_of(ref, k);
        if (tensor_backward(l, NULL, false)) return FAIL("local backward: %s", tensor_last_error());
        tensor_free(l);
        for (int i = 0; i < ref->n_params; i++) local[k * ref->n_params + i] = tensor_retain(ref->params[i]->grad);
    }
    for (int i = 0; i < m->n_params && rc == 0; i++) {
        struct tensor *p = m->params[i], *gr = dist_autograd_get_gradient(ctx, p);
        if (memcmp(tensor_data(p), tensor_data(ref->params[i]), tensor_nbytes(p)))
            rc = FAIL("parameter %d differs from rank 0's initial value", i);
        if (!gr) rc = rc ? rc : FAIL("no gradient for parameter %d", i);
        for (int64_t j = 0; rc == 0 && j < p->numel; j++) {
            double mean = 0, scale = 0;
            for (int k = 0; k < TRAINERS; k++) {
                double v = tensor_f32(local[k * m->n_params + i])[j];
                mean += v / TRAINERS;
                scale += fabs(v) / TRAINERS;
            }
            double got = tensor_f32(gr)[j];
            if (fabs(got - mean) > 1e-6 * scale + 1e-12)
                rc = FAIL("parameter %d [%lld]: %.9g, mean of local gradients %.9g", i, (long long)j, got, mean);
        }
        /* the same bits on every trainer */
        if (rc == 0) {
            int64_t n = p->numel * TRAINERS;
            struct tensor *all = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &n);
            if (pg_allgather(g, gr, all)) rc = FAIL("allgather: %s", pg_last_error());
            for (int k = 0; rc == 0 && k < TRAINERS; k++)
                if (memcmp(tensor_f32(all) + k * p->numel, tensor_data(gr), tensor_nbytes(gr)))
                    rc = FAIL("parameter %d: trainer %d's gradient differs from mine", i, k);
            tensor_free(all);
        }
        tensor_free(gr);
    }
    for (int i = 0; i < TRAINERS * m->n_params; i++) tensor_free(local[i]);
    free(local);
    nn_module_free(ref);
    dist_autograd_release(ctx);
    return rc;
}

/* STEPS of SGD through dist_optim with DDP, against one model trained
 * locally on the union of the batches (the mean of the batch means). */
static int check_training(struct ddp *d, char *why, size_t cap, int rank)
{
    struct nn_module *m = ddp_module(d);
    struct rref *rr[8];
    for (int i = 0; i < m->n_params; i++) {
        struct rpc_value v = rpc_tensor(m->params[i]);
        rr[i] = rref_new_local_value(&v);
    }
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = LR;
    struct dist_optim *o = dist_optim_new(OPTIM_SGD, &h, m->n_params, rr);
    if (!o) return FAIL("dist_optim_new: %s", rpc_last_error());
    struct nn_module *one = make_model(100);
    struct optim *lo = optim_new(OPTIM_SGD, &h, one->n_params, one->params);
    int rc = 0;
    for (int s = 0; s < STEPS && rc == 0; s++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *loss = loss_of(m, rank);
        if (dist_autograd_backward(ctx, 1, &loss, false) || dist_optim_step(o, ctx))
            rc = FAIL("step %d: %s", s, rpc_last_error());
        tensor_free(loss);
        dist_autograd_release(ctx);

        struct tensor *sum = NULL;
        for (int k = 0; k < TRAINERS; k++) {
            struct tensor *l = loss_of(one, k), *t = sum ? tensor_add(sum, l) : tensor_retain(l);
            tensor_free(l);
            tensor_free(sum);
            sum = t;
        }
        struct tensor *mean = tensor_mul_scalar(sum, 1.0f / TRAINERS);
        for (int i = 0; i < one->n_params; i++) tensor_zero_grad(one->params[i]);
        if (tensor_backward(mean, NULL, false)) rc = FAIL("local backward: %s", tensor_last_error());
        struct tensor *grads[8];
        for (int i = 0; i < one->n_params; i++) grads[i] = one->params[i]->grad;
        if (rc == 0 && optim_step(lo, grads)) rc = FAIL("optim_step: %s", optim_last_error());
        tensor_free(sum);
        tensor_free(mean);
    }
    for (int i = 0; i < m->n_params && rc == 0; i++)
        for (int64_t j = 0; j < m->params[i]->numel && rc == 0; j++) {
            double a = tensor_f32(m->params[i])[j], b = tensor_f32(one->params[i])[j];
            if (fabs(a - b) > 1e-5 * fabs(b) + 1e-7)
                rc = FAIL("after %d steps, parameter %d [%lld]: DDP %.9g, union-batch model %.9g", STEPS, i,
                          (long long)j, a, b);
        }
    optim_free(lo);
    nn_module_free(one);
    dist_optim_free(o);
    for (int i = 0; i < m->n_params; i++) rref_free(rr[i]);
    return rc;
}

static int trainer(int rank, char *why, size_t cap)
{
    struct process_group *g = pg_new("trainers", TRAINERS, ALL, 20000);
    if (!g) return FAIL("%s", pg_last_error());
    struct nn_module *m = make_model(100 + (uint64_t)rank);
    struct ddp *d = ddp_new(m, g, BUCKET_BYTES);
    int rc = d ? 0 : FAIL("ddp_new: %s", pg_last_error());
    if (rc == 0 && ddp_num_buckets(d) < 3) rc = FAIL("%d buckets, expected several", ddp_num_buckets(d));
    if (rc == 0) rc = check_gradients(d, g, why, cap);
    if (rc == 0) rc = check_training(d, why, cap, rank);
    if (rc == 0 && pg_barrier(g)) rc = FAIL("barrier: %s", pg_last_error());
    ddp_free(d);
    nn_module_free(m);
    pg_free(g);
    return rc;
}

static int child(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    char why[512];
    int rc = trainer(rank, why, sizeof why);
    if (rc) fprintf(stderr, "w%d: %s\n", rank, why);
    rpc_shutdown(true);
    return rc ? 11 : 0;
}

START_TEST(test_ddp_averages_and_trains_like_one_model)
{
    dh_extra_register = register_pg;
    dh_start(TRAINERS, child, NULL);
    char why[512];
    ck_assert_msg(trainer(0, why, sizeof why) == 0, "%s", why);
    dh_stop();
}
END_TEST

/* ---- two backwards through one replica at once ------------------------------- */

static sem_t a_in_engine, b_done;
static struct ddp *solo_ddp;

/* A node run after the Linear's gradients are in: holds backward A there
 * until backward B is over. */
static int hold_backward(struct ag_node *self, struct tensor **gout, struct tensor **gin)
{
    sem_post(&a_in_engine);
    sem_wait(&b_done);
    return 0;
}

static int64_t ctx_of_a;    /* set before A enters the engine (context ids are no counter) */

static void *backward_a(void *arg)
{
    int *rc = arg;
    struct tensor *x = dh_random(2, IN, 1);
    struct tensor *held = dh_random(1, 1, 2);
    struct ag_node *hold = ag_node_new("HoldBackward", 1, 0, hold_backward, NULL, NULL);
    tensor_set_grad_fn(held, hold, 0);   /* created first: the engine runs it last */
    ag_node_free(hold);
    int64_t ctx = dist_autograd_context_new();
    ctx_of_a = ctx;
    struct tensor *y = nn_forward1(ddp_module(solo_ddp), x), *s1 = tensor_sum(y), *s2 = tensor_sum(held);
    struct tensor *loss = tensor_add(s1, s2);
    *rc = dist_autograd_backward(ctx, 1, &loss, false);
    dist_autograd_release(ctx);
    struct tensor *all[] = {x, held, y, s1, s2, loss};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
    return NULL;
}

/* While backward A is held inside the engine (its module's gradients
 * posted), backward B through the same replica fails naming both
 * contexts; A then finishes and is reduced. */
START_TEST(test_two_backwards_at_once_refused)
{
    dh_extra_register = register_pg;
    dh_start(1, NULL, NULL);
    struct process_group *g = pg_new("solo", 1, ALL, 0);
    ck_assert_msg(g != NULL, "%s", pg_last_error());
    struct nn_module *m = make_model(5);
    solo_ddp = ddp_new(m, g, 0);
    ck_assert_ptr_nonnull(solo_ddp);
    sem_init(&a_in_engine, 0, 0);
    sem_init(&b_done, 0, 0);
    pthread_t ta;
    int rc_a = -5;
    ck_assert_int_eq(pthread_create(&ta, NULL, backward_a, &rc_a), 0);
    sem_wait(&a_in_engine);
    int64_t ctx = dist_autograd_context_new();
    int64_t ctx_a = ctx_of_a;  /* A posted a_in_engine after setting it */
    struct tensor *x = dh_random(2, IN, 3), *y = nn_forward1(m, x), *loss = tensor_sum(y);
    ck_assert_int_eq(dist_autograd_backward(ctx, 1, &loss, false), -1);
    char want[256];
    snprintf(want, sizeof want,
             "ddp: a backward in context %lld reached the module while one in context %lld was under way "
             "(one at a time per process)", (long long)ctx, (long long)ctx_a);
    ck_assert_str_eq(rpc_last_error(), want);
    dist_autograd_release(ctx);
    sem_post(&b_done);
    pthread_join(ta, NULL);
    ck_assert_msg(rc_a == 0, "backward A: %s", rpc_last_error());
    ck_assert_int_eq(ddp_num_reductions(solo_ddp), 1);
    struct tensor *all[] = {x, y, loss};
    for (int i = 0; i < 3; i++) tensor_free(all[i]);
    ddp_free(solo_ddp);
    nn_module_free(m);
    pg_free(g);
    dh_stop();
}
END_TEST

KIT_MAIN("ddp",
         { "ddp", 240, .tests = { test_ddp_averages_and_trains_like_one_model, test_two_backwards_at_once_refused } })
