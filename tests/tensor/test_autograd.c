/* The autograd engine: copy-on-write against optimizer updates, in-place
 * detection, retain_graph, gradient summing, ordering, custom nodes and
 * sinks (the hooks distributed autograd uses) and concurrent backwards. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "kit.h"

static struct tensor *vec(int n, const float *v)
{
    return tensor_from_f32(1, (int64_t[]){n}, v);
}

static struct tensor *param(int ndim, const int64_t *shape, const float *v)
{
    struct tensor *t = tensor_from_f32(ndim, shape, v);
    tensor_set_requires_grad(t, true);
    return t;
}

static void assert_close(const struct tensor *t, const float *want, int n)
{
    ck_assert_int_eq(t->numel, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabsf(tensor_f32(t)[i] - want[i]) <= 1e-5f + 1e-5f * fabsf(want[i]),
                      "[%d] = %g, want %g", i, tensor_f32(t)[i], want[i]);
}

/* ---- copy-on-write and in-place detection ------------------------------------------ */

START_TEST(test_cow_parameter_update)
{
    struct tensor *x = param(2, (int64_t[]){1, 2}, (float[]){1, 2});
    struct tensor *w = param(2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
    struct tensor *y = tensor_matmul(x, w);
    struct tensor *loss = tensor_sum(y);
    /* an optimizer step between forward and backward */
    float *wd = tensor_mutable_data(w);
    for (int i = 0; i < 4; i++) wd[i] = 100.0f;
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    /* dloss/dx = row sums of the ORIGINAL w */
    assert_close(x->grad, (float[]){3, 7}, 2);
    assert_close(w->grad, (float[]){1, 1, 2, 2}, 4);
    ck_assert_float_eq(tensor_f32(w)[0], 100.0f);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    tensor_free(w);
}
END_TEST

START_TEST(test_cow_input_update)
{
    struct tensor *a = vec(3, (float[]){1, 2, 3});   /* data, no grad */
    struct tensor *w = param(1, (int64_t[]){3}, (float[]){5, 6, 7});
    struct tensor *y = tensor_mul(a, w);
    struct tensor *loss = tensor_sum(y);
    float *ad = tensor_mutable_data(a);
    ad[0] = ad[1] = ad[2] = -1.0f;
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    assert_close(w->grad, (float[]){1, 2, 3}, 3);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(a);
    tensor_free(w);
}
END_TEST

START_TEST(test_inplace_write_detected)
{
    struct tensor *x = param(1, (int64_t[]){2}, (float[]){0.5f, 1.0f});
    struct tensor *h = tensor_exp(x);        /* saves its output */
    struct tensor *loss = tensor_sum(h);
    /* a raw in-place write into the saved output, as an in-place kernel would do */
    tensor_f32(h)[0] = 42.0f;
    atomic_fetch_add(&h->storage->version, 1);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(),
                     "ExpBackward: a tensor saved for backward was modified by an in-place operation "
                     "(saved at version 0, now version 1)");
    ck_assert_ptr_null(x->grad);
    tensor_free(loss);
    tensor_free(h);
    tensor_free(x);
}
END_TEST

/* ---- retain_graph and errors ---------------------------------------------------------- */

START_TEST(test_retain_graph)
{
    struct tensor *x = param(1, (int64_t[]){2}, (float[]){1, 2});
    struct tensor *sq = tensor_square(x);
    struct tensor *loss = tensor_sum(sq);
    ck_assert_int_eq(tensor_backward(loss, NULL, true), 0);
    assert_close(x->grad, (float[]){2, 4}, 2);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    assert_close(x->grad, (float[]){4, 8}, 2);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(),
                     "autograd_run: SumBackward: its saved state was already freed by an earlier backward; "
                     "pass retain_graph to backward through the graph a second time");
    assert_close(x->grad, (float[]){4, 8}, 2);
    tensor_free(loss);
    tensor_free(sq);
    tensor_free(x);
}
END_TEST

START_TEST(test_backward_errors)
{
    struct tensor *x = param(1, (int64_t[]){2}, (float[]){1, 2});
    struct tensor *c = vec(2, (float[]){1, 2});
    ck_assert_int_eq(tensor_backward(c, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_backward: the tensor does not require grad and has no grad_fn");
    struct tensor *y = tensor_mul_scalar(x, 3.0f);
    ck_assert_int_eq(tensor_backward(y, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_backward: grad can be implicit only for a one-element tensor, not [2]");
    struct tensor *g3 = vec(3, (float[]){1, 1, 1});
    ck_assert_int_eq(tensor_backward(y, g3, false), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_backward: gradient f32 [3] on cpu does not match f32 [2] on cpu");
    struct tensor *g2 = vec(2, (float[]){1, -1});
    ck_assert_int_eq(tensor_backward(y, g2, false), 0);
    assert_close(x->grad, (float[]){3, -3}, 2);
    /* leaf->grad never aliases the caller's gradient tensor */
    ck_assert_ptr_ne(x->grad, g2);
    tensor_zero_grad(x);
    ck_assert_int_eq(tensor_backward(x, g2, false), 0);
    ck_assert_ptr_ne(x->grad, g2);
    float *gd = tensor_mutable_data(g2);
    gd[0] = 99.0f;
    assert_close(x->grad, (float[]){1, -1}, 2);
    tensor_free(g3);
    tensor_free(g2);
    tensor_free(y);
    tensor_free(c);
    tensor_free(x);
}
END_TEST

START_TEST(test_no_grad_mode)
{
    struct tensor *x = param(1, (int64_t[]){2}, (float[]){1, 2});
    ck_assert(autograd_enabled());
    ck_assert(autograd_set_enabled(false));
    struct tensor *y = tensor_exp(x);
    ck_assert(!y->requires_grad);
    ck_assert_ptr_null(y->grad_fn);
    ck_assert(!autograd_set_enabled(true));
    struct tensor *z = tensor_exp(x);
    ck_assert(z->requires_grad);
    ck_assert_ptr_nonnull(z->grad_fn);
    ck_assert_str_eq(z->grad_fn->name, "ExpBackward");
    tensor_free(y);
    tensor_free(z);
    tensor_free(x);
}
END_TEST

/* ---- gradient flow ------------------------------------------------------------------- */

START_TEST(test_sum_at_shared_input)
{
    /* h feeds two edges of one node and one more later: its gradient is summed */
    struct tensor *x = param(1, (int64_t[]){2}, (float[]){0.0f, 1.0f});
    struct tensor *h = tensor_exp(x);
    struct tensor *a = tensor_add(h, h);
    struct tensor *b = tensor_mul(a, h);     /* 2 h^2 */
    struct tensor *loss = tensor_sum(b);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    float want[2] = {4 * expf(0.0f) * expf(0.0f), 4 * expf(1.0f) * expf(1.0f)};   /* d/dx 2e^{2x} */
    assert_close(x->grad, want, 2);
    struct tensor *all[] = {loss, b, a, h, x};
    for (int i = 0; i < 5; i++) tensor_free(all[i]);
}
END_TEST

START_TEST(test_long_chain)
{
    struct tensor *x = param(0, NULL, (float[]){1.0f});
    struct tensor *h = tensor_retain(x);
    for (int i = 0; i < 20000; i++) {
        struct tensor *n = tensor_add_scalar(h, 0.001f);
        tensor_free(h);
        h = n;
    }
    ck_assert_int_eq(tensor_backward(h, NULL, false), 0);
    assert_close(x->grad, (float[]){1.0f}, 1);
    tensor_free(h);
    tensor_free(x);
}
END_TEST

/* The same through the second input of each node (the first has no
 * gradient: h = c + h, as in a returns recursion), with the last reference
 * dropped on a thread with a 512 KiB stack (a handler thread, say): freeing
 * the graph must not recurse once per node. */
static void *free_main(void *arg)
{
    tensor_free(arg);
    return NULL;
}

START_TEST(test_long_chain_second_input)
{
    struct tensor *x = param(0, NULL, (float[]){1.0f});
    struct tensor *c = tensor_scalar_f32(0.001f);
    struct tensor *h = tensor_retain(x);
    for (int i = 0; i < 20000; i++) {
        struct tensor *n = tensor_add(c, h);
        tensor_free(h);
        h = n;
    }
    ck_assert_ptr_null(h->grad_fn->next[0].node);
    ck_assert_int_eq(tensor_backward(h, NULL, true), 0);
    assert_close(x->grad, (float[]){1.0f}, 1);
    pthread_attr_t attr;
    pthread_t th;
    ck_assert_int_eq(pthread_attr_init(&attr), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&attr, 512 << 10), 0);
    ck_assert_int_eq(pthread_create(&th, &attr, free_main, h), 0);   /* the last reference to the chain */
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    pthread_attr_destroy(&attr);
    tensor_free(c);
    tensor_free(x);
}
END_TEST

/* ---- custom nodes and sinks ----------------------------------------------------------- */

static int order_log[8], order_n;

/* recv: no next edges; remembers the gradient it got (as if sending it on). */
static int recv_backward(struct ag_node *self, struct tensor **grad_out, struct tensor **grad_in)
{
    (void)grad_in;
    struct tensor **slot = self->ctx;
    tensor_free(*slot);
    *slot = tensor_retain(grad_out[0]);
    order_log[order_n++] = (int)self->seq;
    return 0;
}

/* send: passes each received gradient to the matching edge, doubled. */
static int send_backward(struct ag_node *self, struct tensor **grad_out, struct tensor **grad_in)
{
    for (int i = 0; i < self->n_next; i++) grad_in[i] = grad_out[i] ? tensor_mul_scalar(grad_out[i], 2.0f) : NULL;
    order_log[order_n++] = (int)self->seq;
    return 0;
}

static int failing_backward(struct ag_node *self, struct tensor **grad_out, struct tensor **grad_in)
{
    (void)self; (void)grad_out; (void)grad_in;
    tensor_error("FailingBackward: peer went away");
    return -1;
}

struct collect {
    int calls;
    struct tensor *leaf[4], *grad[4];
};

static void collect_accumulate(void *user, struct tensor *leaf, struct tensor *grad)
{
    struct collect *c = user;
    ck_assert_int_lt(c->calls, 4);
    c->leaf[c->calls] = leaf;
    c->grad[c->calls++] = tensor_retain(grad);
}

static void collect_free(struct collect *c)
{
    for (int i = 0; i < c->calls; i++) tensor_free(c->grad[i]);
}

/* A ready callback that records each call and what the sink had by then. */
struct ready_log {
    struct collect c;
    int n;
    struct tensor *leaf[4], *grad[4];
    int accumulated_then[4];
};

static void log_ready(void *user, struct tensor *leaf, struct tensor *grad)
{
    struct ready_log *l = user;
    ck_assert_int_lt(l->n, 4);
    l->leaf[l->n] = leaf;
    l->grad[l->n] = tensor_retain(grad);
    l->accumulated_then[l->n++] = l->c.calls;
}

static void log_accumulate(void *user, struct tensor *leaf, struct tensor *grad)
{
    collect_accumulate(&((struct ready_log *)user)->c, leaf, grad);
}

/* loss = sum(x*w1*w2 + w2): w2 (used twice, late in the forward) is ready
 * with its whole gradient before w1's node runs, w1 after; both while the
 * run goes on (the sink has nothing yet), with what the sink gets later. */
START_TEST(test_sink_ready_as_soon_as_complete)
{
    struct tensor *w1 = param(1, (int64_t[]){2}, (float[]){1, 2});
    struct tensor *w2 = param(1, (int64_t[]){2}, (float[]){3, 4});
    struct tensor *x = vec(2, (float[]){1, 1});
    struct tensor *h = tensor_mul(x, w1), *y = tensor_mul(h, w2), *z = tensor_add(y, w2), *loss = tensor_sum(z);
    struct ready_log l = {0};
    struct ag_sink sink = {log_accumulate, &l, log_ready};
    struct ag_edge root = tensor_grad_edge(loss);
    struct tensor *one = tensor_scalar_f32(1.0f);
    ck_assert_int_eq(autograd_run(1, &root, &one, &sink, false), 0);
    ck_assert_int_eq(l.n, 2);
    ck_assert_ptr_eq(l.leaf[0], w2);
    ck_assert_ptr_eq(l.leaf[1], w1);
    assert_close(l.grad[0], (float[]){2, 3}, 2);    /* h + 1 */
    assert_close(l.grad[1], (float[]){3, 4}, 2);    /* x * w2 */
    ck_assert_int_eq(l.accumulated_then[0], 0);
    ck_assert_int_eq(l.accumulated_then[1], 0);
    ck_assert_int_eq(l.c.calls, 2);
    for (int i = 0; i < 2; i++) {
        int j = l.c.leaf[i] == l.leaf[0] ? 0 : 1;
        ck_assert_ptr_eq(l.c.grad[i], l.grad[j]);   /* the same sum, not a second one */
        tensor_free(l.grad[j]);
    }
    collect_free(&l.c);
    ag_node_free(root.node);
    struct tensor *all[] = {w1, w2, x, h, y, z, loss, one};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
}
END_TEST

START_TEST(test_custom_send_node_as_root)
{
    struct tensor *w = param(1, (int64_t[]){2}, (float[]){1, 2});
    struct tensor *v = param(1, (int64_t[]){2}, (float[]){3, 4});
    struct tensor *t = tensor_mul(w, v);     /* a tensor "sent" to a peer */
    /* send node with edges to w (a leaf) and t (an op output) */
    struct ag_node *send = ag_node_new("SendRpcBackward", 2, 2, send_backward, NULL, NULL);
    send->next[0] = tensor_grad_edge(w);
    send->next[1] = tensor_grad_edge(t);
    struct tensor *g0 = vec(2, (float[]){1, 1}), *g1 = vec(2, (float[]){10, 100});
    struct ag_edge roots[2] = {{send, 0}, {send, 1}};
    struct tensor *grads[2] = {g0, g1};
    struct collect c = {0};
    struct ag_sink sink = {collect_accumulate, &c, NULL};
    order_n = 0;
    ck_assert_int_eq(autograd_run(2, roots, grads, &sink, false), 0);
    ck_assert_ptr_null(w->grad);   /* the sink got everything */
    ck_assert_ptr_null(v->grad);
    ck_assert_int_eq(c.calls, 2);
    for (int i = 0; i < 2; i++) {
        if (c.leaf[i] == w) assert_close(c.grad[i], (float[]){2 + 20 * 3, 2 + 200 * 4}, 2);
        else if (c.leaf[i] == v) assert_close(c.grad[i], (float[]){20 * 1, 200 * 2}, 2);
        else ck_abort_msg("sink got an unknown leaf");
    }
    ck_assert_int_eq(order_n, 1);
    /* the node was released: running it again is an error */
    ck_assert_int_eq(autograd_run(2, roots, grads, &sink, false), -1);
    ck_assert_str_eq(tensor_last_error(),
                     "autograd_run: SendRpcBackward: its saved state was already freed by an earlier backward; "
                     "pass retain_graph to backward through the graph a second time");
    collect_free(&c);
    ag_node_free(send);
    tensor_free(g0);
    tensor_free(g1);
    tensor_free(t);
    tensor_free(w);
    tensor_free(v);
}
END_TEST

START_TEST(test_custom_recv_node_receives_gradient)
{
    struct tensor *got = NULL;
    struct ag_node *recv = ag_node_new("RecvRpcBackward", 1, 0, recv_backward, NULL, &got);
    struct tensor *r = vec(2, (float[]){5, 6});   /* a tensor "received" from a peer */
    tensor_set_grad_fn(r, recv, 0);
    ag_node_free(recv);
    struct tensor *w = param(1, (int64_t[]){2}, (float[]){7, 8});
    struct tensor *y = tensor_mul(r, w);
    struct tensor *loss = tensor_sum(y);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    ck_assert_ptr_nonnull(got);
    assert_close(got, (float[]){7, 8}, 2);
    assert_close(w->grad, (float[]){5, 6}, 2);
    tensor_free(got);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(r);
    tensor_free(w);
}
END_TEST

START_TEST(test_later_nodes_run_first)
{
    struct tensor *g1 = NULL, *g2 = NULL;
    struct ag_node *early = ag_node_new("Early", 1, 0, recv_backward, NULL, &g1);
    struct ag_node *late = ag_node_new("Late", 1, 0, recv_backward, NULL, &g2);
    struct tensor *one = vec(1, (float[]){1});
    struct ag_edge roots[2] = {{early, 0}, {late, 0}};
    struct tensor *grads[2] = {one, one};
    order_n = 0;
    ck_assert_int_eq(autograd_run(2, roots, grads, NULL, true), 0);
    ck_assert_int_eq(order_n, 2);
    ck_assert_int_eq(order_log[0], (int)late->seq);
    ck_assert_int_eq(order_log[1], (int)early->seq);
    tensor_free(g1);
    tensor_free(g2);
    tensor_free(one);
    ag_node_free(early);
    ag_node_free(late);
}
END_TEST

START_TEST(test_node_failure_stops_run)
{
    struct tensor *w = param(1, (int64_t[]){1}, (float[]){1});
    struct ag_node *bad = ag_node_new("FailingBackward", 1, 1, failing_backward, NULL, NULL);
    bad->next[0] = tensor_grad_edge(w);
    struct tensor *one = vec(1, (float[]){1});
    struct ag_edge root = {bad, 0};
    ck_assert_int_eq(autograd_run(1, &root, &one, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(), "FailingBackward: peer went away");
    ck_assert_ptr_null(w->grad);
    struct ag_edge wrong = {bad, 3};
    ck_assert_int_eq(autograd_run(1, &wrong, &one, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(), "autograd_run: root 0 points at input 3 of FailingBackward, which has 1");
    ag_node_free(bad);
    tensor_free(one);
    tensor_free(w);
}
END_TEST

START_TEST(test_bad_root_gradient_rejected)
{
    /* a root gradient of the wrong shape (say from a peer) reaches an op node */
    struct tensor *x = param(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *w = param(2, (int64_t[]){4, 3}, (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    struct tensor *y = tensor_linear(x, w, NULL);
    struct ag_edge e = tensor_grad_edge(y);
    struct tensor *g = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){3});
    ck_assert_int_eq(autograd_run(1, &e, &g, NULL, true), -1);
    ck_assert_str_eq(tensor_last_error(), "LinearBackward: gradient f32 [3] on cpu does not match the output f32 [2,4] on cpu");
    struct tensor *gd = tensor_new(DTYPE_F64, DEVICE_CPU, 2, (int64_t[]){2, 4});
    ck_assert_int_eq(autograd_run(1, &e, &gd, NULL, true), -1);
    ck_assert_str_eq(tensor_last_error(), "LinearBackward: gradient f64 [2,4] on cpu does not match the output f32 [2,4] on cpu");
    ck_assert_ptr_null(w->grad);
    /* split: each piece's gradient is checked against that piece */
    struct tensor *p[2];
    ck_assert_int_eq(tensor_split(x, 1, 2, (int64_t[]){1, 2}, p), 0);
    struct ag_edge e1 = tensor_grad_edge(p[1]);
    struct tensor *g22 = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){2, 1});
    ck_assert_int_eq(autograd_run(1, &e1, &g22, NULL, true), -1);
    ck_assert_str_eq(tensor_last_error(), "SplitBackward: gradient f32 [2,1] on cpu does not match the output f32 [2,2] on cpu");
    ag_node_free(e.node);
    ag_node_free(e1.node);
    struct tensor *all[] = {x, w, y, g, gd, p[0], p[1], g22};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
}
END_TEST

/* Only f32 tensors have gradients: the engine sums gradients with f32
 * kernels, so a u8 or i64 leaf that requires grad (rpc decodes the flag for
 * any dtype) and its gradient are refused, never summed as floats over a
 * buffer a quarter or half that size. */
START_TEST(test_non_f32_gradients_rejected)
{
    struct tensor *u = tensor_new(DTYPE_U8, DEVICE_CPU, 1, (int64_t[]){100});
    struct tensor *gu = tensor_new(DTYPE_U8, DEVICE_CPU, 1, (int64_t[]){100});
    struct tensor *one = tensor_new(DTYPE_U8, DEVICE_CPU, 0, NULL);
    u->requires_grad = true;
    one->requires_grad = true;
    ck_assert_int_eq(tensor_backward(u, gu, false), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_backward: the tensor is u8; only f32 tensors have gradients");
    ck_assert_int_eq(tensor_backward(one, NULL, false), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_backward: the tensor is u8; only f32 tensors have gradients");
    /* the engine itself, reached with the leaf as a root (as distributed
     * autograd reaches it), twice so that a second gradient would be summed */
    for (int k = 0; k < 2; k++) {
        struct ag_edge e = tensor_grad_edge(u);
        ck_assert_int_eq(autograd_run(1, &e, &gu, NULL, false), -1);
        ck_assert_str_eq(tensor_last_error(), "autograd_run: AccumulateGrad: gradient u8 [100] on cpu is not f32");
        ag_node_free(e.node);
    }
    ck_assert_ptr_null(u->grad);
    tensor_free(u);
    tensor_free(gu);
    tensor_free(one);
}
END_TEST

/* ---- concurrency ------------------------------------------------------------------------ */

#define N_THREADS 4
#define N_ITERS 50

struct shared_model {
    struct tensor *w, *b;
};

struct worker {
    struct shared_model *m;
    struct tensor *x;
    bool use_sink;
    struct tensor *gw, *gb;   /* summed over iterations (sink mode) */
    int failures;
};

static struct tensor *model_loss(struct shared_model *m, struct tensor *x)
{
    struct tensor *h = tensor_linear(x, m->w, m->b);
    struct tensor *t = tensor_tanh(h);
    struct tensor *l = tensor_sum(t);
    tensor_free(h);
    tensor_free(t);
    return l;
}

static void sum_into(struct tensor **acc, struct tensor *g)
{
    if (!*acc) {
        *acc = tensor_clone_to(g, DEVICE_CPU);
        return;
    }
    float *a = tensor_mutable_data(*acc);
    for (int64_t i = 0; i < g->numel; i++) a[i] += tensor_f32(g)[i];
}

static void worker_accumulate(void *user, struct tensor *leaf, struct tensor *grad)
{
    struct worker *wk = user;
    if (leaf == wk->m->w) sum_into(&wk->gw, grad);
    else if (leaf == wk->m->b) sum_into(&wk->gb, grad);
    else wk->failures++;
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    for (int it = 0; it < N_ITERS; it++) {
        struct tensor *loss = model_loss(wk->m, wk->x);
        struct ag_edge e = tensor_grad_edge(loss);
        struct tensor *one = tensor_scalar_f32(1.0f);
        struct ag_sink sink = {worker_accumulate, wk, NULL};
        if (autograd_run(1, &e, &one, wk->use_sink ? &sink : NULL, false) < 0) wk->failures++;
        ag_node_free(e.node);
        tensor_free(one);
        tensor_free(loss);
    }
    return NULL;
}

static void concurrent(bool use_sink)
{
    struct shared_model m = {param(2, (int64_t[]){3, 2}, (float[]){0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}),
                             param(1, (int64_t[]){3}, (float[]){0.01f, 0.02f, -0.03f})};
    struct worker wk[N_THREADS] = {0};
    float serial_w[N_THREADS][6], serial_b[N_THREADS][3];
    for (int t = 0; t < N_THREADS; t++) {
        float xv[8];
        for (int i = 0; i < 8; i++) xv[i] = (float)((t + 1) * (i - 3)) / 7.0f;
        wk[t] = (struct worker){&m, tensor_from_f32(2, (int64_t[]){4, 2}, xv), use_sink, NULL, NULL, 0};
        /* the serial reference for this thread's input */
        struct tensor *loss = model_loss(&m, wk[t].x);
        ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
        memcpy(serial_w[t], tensor_f32(m.w->grad), sizeof serial_w[t]);
        memcpy(serial_b[t], tensor_f32(m.b->grad), sizeof serial_b[t]);
        tensor_zero_grad(m.w);
        tensor_zero_grad(m.b);
        tensor_free(loss);
    }
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, worker_main, &wk[t]), 0);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    float total_w[6] = {0}, total_b[3] = {0};
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_int_eq(wk[t].failures, 0);
        float want_w[6], want_b[3];
        for (int i = 0; i < 6; i++) total_w[i] += (want_w[i] = N_ITERS * serial_w[t][i]);
        for (int i = 0; i < 3; i++) total_b[i] += (want_b[i] = N_ITERS * serial_b[t][i]);
        if (use_sink) {   /* each sink got exactly its own thread's gradients */
            for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(tensor_f32(wk[t].gw)[i], want_w[i], 1e-3f);
            for (int i = 0; i < 3; i++) ck_assert_float_eq_tol(tensor_f32(wk[t].gb)[i], want_b[i], 1e-3f);
        }
        tensor_free(wk[t].gw);
        tensor_free(wk[t].gb);
        tensor_free(wk[t].x);
    }
    if (use_sink) {
        ck_assert_ptr_null(m.w->grad);
        ck_assert_ptr_null(m.b->grad);
    } else {   /* every thread's gradient landed in .grad, none lost */
        for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(tensor_f32(m.w->grad)[i], total_w[i], 1e-2f);
        for (int i = 0; i < 3; i++) ck_assert_float_eq_tol(tensor_f32(m.b->grad)[i], total_b[i], 1e-2f);
    }
    tensor_free(m.w);
    tensor_free(m.b);
}

START_TEST(test_concurrent_sinks) { concurrent(true); }
END_TEST

START_TEST(test_concurrent_default_accumulation) { concurrent(false); }
END_TEST

/* Forward and backward on one thread while another keeps updating the
 * parameter with staged writes (tensor_write_begin/end): every forward sees
 * one whole update (all four entries equal) and its backward uses exactly
 * the values its forward used. */
#define WN 128

struct updater {
    struct tensor *w;
    atomic_bool stop;
    long updates;
};

static void *updater_main(void *arg)
{
    struct updater *u = arg;
    float v = 0.0f;
    while (!atomic_load(&u->stop)) {
        struct tensor_write wr;
        float *d = tensor_write_begin(u->w, &wr);
        if (v < 100000.0f) v += 1.0f;   /* WN v stays exact in float */
        for (int i = 0; i < WN * WN; i++) d[i] = v;
        tensor_write_end(u->w, &wr);
        u->updates++;
    }
    return NULL;
}

START_TEST(test_update_during_backward)
{
    struct tensor *w0 = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){WN, WN});
    tensor_set_requires_grad(w0, true);
    struct updater u = {w0, false, 0};
    struct tensor *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){1, WN});
    for (int i = 0; i < WN; i++) tensor_f32(x)[i] = 1.0f;
    tensor_set_requires_grad(x, true);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, updater_main, &u), 0);
    int bad = 0, changes = 0;
    float first = -1, last = -1;
    /* at least 300 rounds, and on until the forwards have seen the parameter
     * change twice (a loaded machine may not run the updater for a while),
     * within 60 s */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int it = 0; it < 300 || changes < 2; it++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 60) break;
        struct tensor *y = tensor_matmul(x, u.w);   /* y[j] = sum_i w[i,j] */
        struct tensor *loss = tensor_sum(y);
        ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
        /* all entries of w equal v at forward time: every y[j] and every
         * x->grad[i] (= sum_j w[i,j]) is WN v */
        float y0 = tensor_f32(y)[0];
        for (int j = 0; j < WN; j++)
            if (tensor_f32(y)[j] != y0 || tensor_f32(x->grad)[j] != y0) bad++;
        if (it == 0) first = y0;
        else if (y0 != last) changes++;
        last = y0;
        tensor_zero_grad(x);
        tensor_free(loss);
        tensor_free(y);
    }
    atomic_store(&u.stop, true);
    pthread_join(th, NULL);
    ck_assert_int_eq(bad, 0);
    ck_assert_msg(changes >= 2 && last > first, "the forwards saw the parameter change %d times in 60 s", changes);
    ck_assert_uint_eq(atomic_load(&u.w->storage->version), (uint64_t)u.updates);
    tensor_free(x);
    tensor_free(u.w);
}
END_TEST

KIT_MAIN("tensor_autograd",
         { "engine", 0, .tests = { test_cow_parameter_update, test_cow_input_update, test_inplace_write_detected,
           test_retain_graph, test_backward_errors, test_no_grad_mode, test_sum_at_shared_input, test_long_chain,
           test_long_chain_second_input } },
         { "custom_nodes", 0, .tests = { test_custom_send_node_as_root, test_sink_ready_as_soon_as_complete,
           test_custom_recv_node_receives_gradient, test_later_nodes_run_first, test_node_failure_stops_run,
           test_bad_root_gradient_rejected, test_non_f32_gradients_rejected } },
         { "threads", 0, .tests = { test_concurrent_sinks, test_concurrent_default_accumulation,
           test_update_during_backward } })
