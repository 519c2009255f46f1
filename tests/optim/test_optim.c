/* Local optimizers against PyTorch: every trajectory in
 * fixtures/optim_trajectories.json (written by scripts/gen_optim_fixtures.py
 * with torch) is replayed step by step; plus state save/restore, rejection
 * of bad state, copy-on-write and bad-input errors. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optim/optim.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "kit.h"

#ifndef OPTIM_FIXTURE
#error "OPTIM_FIXTURE must name the fixture file"
#endif

#define NP 2   /* params per fixture case */

static cJSON *fixtures;

static void load_fixtures(void)
{
    if (fixtures) return;
    char *text = kit_must_read(OPTIM_FIXTURE, NULL);
    fixtures = cJSON_Parse(text);
    free(text);
    ck_assert_msg(fixtures != NULL, "bad JSON in %s", OPTIM_FIXTURE);
}

static cJSON *find_case(const char *name)
{
    load_fixtures();
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(fixtures, "cases"))
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name) == 0) return c;
    ck_abort_msg("no fixture case %s", name);
    return NULL;
}

static double num(const cJSON *obj, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItem(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static bool flag(const cJSON *obj, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItem(obj, key));
}

static enum optim_kind kind_of(const char *s)
{
    for (int k = 0; k < OPTIM_KIND_COUNT; k++)
        if (strcmp(optim_kind_name((enum optim_kind)k), s) == 0) return (enum optim_kind)k;
    ck_abort_msg("unknown kind %s", s);
    return OPTIM_SGD;
}

static struct optim_hyper hyper_of(enum optim_kind kind, const cJSON *h)
{
    struct optim_hyper d = optim_defaults(kind);
    d.lr = num(h, "lr", d.lr);
    d.momentum = num(h, "momentum", d.momentum);
    d.dampening = num(h, "dampening", d.dampening);
    d.nesterov = flag(h, "nesterov");
    d.weight_decay = num(h, "weight_decay", d.weight_decay);
    d.beta1 = num(h, "beta1", d.beta1);
    d.beta2 = num(h, "beta2", d.beta2);
    d.eps = num(h, "eps", d.eps);
    d.amsgrad = flag(h, "amsgrad");
    d.alpha = num(h, "alpha", d.alpha);
    d.centered = flag(h, "centered");
    return d;
}

static void fill_floats(float *out, const cJSON *arr, int64_t n)
{
    ck_assert_int_eq(cJSON_GetArraySize(arr), n);
    int64_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) out[i++] = (float)v->valuedouble;
}

static struct tensor *tensor_of_json(const cJSON *shape, const cJSON *values)
{
    int64_t dims[4];
    int nd = cJSON_GetArraySize(shape);
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        dims[d] = (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
        numel *= dims[d];
    }
    float buf[64];
    ck_assert_int_le(numel, 64);
    fill_floats(buf, values, numel);
    return tensor_from_f32(nd, dims, buf);
}

/* A replay of one fixture case on the CPU. */
struct replay {
    const cJSON *c;
    enum optim_kind kind;
    struct optim_hyper h;
    struct tensor *params[NP];
    struct optim *opt;
    int steps;
};

static void replay_init(struct replay *r, const char *name)
{
    memset(r, 0, sizeof *r);
    r->c = find_case(name);
    r->kind = kind_of(cJSON_GetObjectItem(r->c, "kind")->valuestring);
    r->h = hyper_of(r->kind, cJSON_GetObjectItem(r->c, "hyper"));
    const cJSON *shapes = cJSON_GetObjectItem(r->c, "shapes"), *init = cJSON_GetObjectItem(r->c, "init");
    for (int i = 0; i < NP; i++)
        r->params[i] = tensor_of_json(cJSON_GetArrayItem(shapes, i), cJSON_GetArrayItem(init, i));
    r->opt = optim_new(r->kind, &r->h, NP, r->params);
    ck_assert_msg(r->opt != NULL, "%s", optim_last_error());
    r->steps = (int)num(r->c, "steps", 0);
}

static void replay_free(struct replay *r)
{
    optim_free(r->opt);
    for (int i = 0; i < NP; i++) tensor_free(r->params[i]);
}

static void assert_close(const char *what, int step, const float *got, const cJSON *want, int64_t n,
                         double atol, double rtol)
{
    float ref[64];
    fill_floats(ref, want, n);
    for (int64_t j = 0; j < n; j++)
        ck_assert_msg(fabs((double)got[j] - ref[j]) <= atol + rtol * fabs(ref[j]),
                      "%s step %d element %lld: got %.9g, want %.9g", what, step, (long long)j,
                      (double)got[j], (double)ref[j]);
}

/* Runs step s of the case (clip / schedule included) and checks the result. */
static void replay_step(struct replay *r, int s)
{
    const cJSON *c = r->c;
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "grads"), s);
    const cJSON *shapes = cJSON_GetObjectItem(c, "shapes");
    struct tensor *grads[NP];
    for (int i = 0; i < NP; i++) {
        const cJSON *g = cJSON_GetArrayItem(row, i);
        grads[i] = cJSON_IsNull(g) ? NULL : tensor_of_json(cJSON_GetArrayItem(shapes, i), g);
    }
    const cJSON *sched = cJSON_GetObjectItem(c, "schedule");
    double want_lr = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "lrs"), s)->valuedouble;
    if (sched) {
        double lr = optim_lr_linear(r->h.lr, num(sched, "start_factor", 1), num(sched, "end_factor", 1),
                                    (int64_t)num(sched, "total_iters", 0), s);
        ck_assert_msg(fabs(lr - want_lr) <= 1e-12 * want_lr, "lr at step %d: %.17g vs %.17g", s, lr, want_lr);
        optim_set_lr(r->opt, lr);
    }
    ck_assert_double_eq_tol(optim_get_lr(r->opt), want_lr, 1e-12);
    const cJSON *clip = cJSON_GetObjectItem(c, "clip_max_norm");
    if (clip) {
        double total = -1;
        ck_assert_int_eq(optim_clip_grad_norm(NP, grads, clip->valuedouble, &total), 0);
        double want = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "total_norms"), s)->valuedouble;
        ck_assert_msg(fabs(total - want) <= 1e-6 + 1e-5 * want, "total norm at step %d: %g vs %g", s, total, want);
    }
    ck_assert_msg(optim_step(r->opt, grads) == 0, "%s", optim_last_error());
    const cJSON *after = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "trajectory"), s);
    for (int i = 0; i < NP; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s param %d", cJSON_GetObjectItem(c, "name")->valuestring, i);
        assert_close(what, s, tensor_f32(r->params[i]), cJSON_GetArrayItem(after, i), r->params[i]->numel,
                     2e-6, 2e-5);
        tensor_free(grads[i]);
    }
}

static void replay_all(const char *name)
{
    struct replay r;
    replay_init(&r, name);
    for (int s = 0; s < r.steps; s++) replay_step(&r, s);
    replay_free(&r);
}

/* ---- trajectories ------------------------------------------------------- */

START_TEST(test_sgd_plain) { replay_all("sgd_plain"); }
END_TEST
START_TEST(test_sgd_momentum) { replay_all("sgd_momentum"); }
END_TEST
START_TEST(test_sgd_nesterov_wd) { replay_all("sgd_nesterov_wd"); }
END_TEST
START_TEST(test_adam) { replay_all("adam"); }
END_TEST
START_TEST(test_adam_wd_skip)
{
    replay_all("adam_wd_skip");
    /* per-param step counts skip NULL grads, as torch's state["step"] */
    struct replay r;
    replay_init(&r, "adam_wd_skip");
    for (int s = 0; s < r.steps; s++) replay_step(&r, s);
    ck_assert_int_eq(optim_param_steps(r.opt, 0), 19);
    ck_assert_int_eq(optim_param_steps(r.opt, 1), 18);
    replay_free(&r);
}
END_TEST
START_TEST(test_adam_amsgrad) { replay_all("adam_amsgrad"); }
END_TEST
START_TEST(test_adamw) { replay_all("adamw"); }
END_TEST
START_TEST(test_rmsprop) { replay_all("rmsprop"); }
END_TEST
START_TEST(test_rmsprop_centered_momentum) { replay_all("rmsprop_centered_momentum"); }
END_TEST
START_TEST(test_clip_grad_norm) { replay_all("sgd_momentum_clip"); }
END_TEST
START_TEST(test_linear_warmup) { replay_all("sgd_linear_warmup"); }
END_TEST
START_TEST(test_linear_decay) { replay_all("adam_linear_decay"); }
END_TEST

START_TEST(test_lr_linear_edges)
{
    ck_assert_double_eq(optim_lr_linear(0.1, 1.0, 0.5, 10, 0), 0.1);
    ck_assert_double_eq_tol(optim_lr_linear(0.1, 1.0, 0.5, 10, 5), 0.075, 1e-15);
    ck_assert_double_eq_tol(optim_lr_linear(0.1, 1.0, 0.5, 10, 10), 0.05, 1e-15);
    ck_assert_double_eq_tol(optim_lr_linear(0.1, 1.0, 0.5, 10, 1000), 0.05, 1e-15);
    ck_assert_double_eq_tol(optim_lr_linear(0.1, 1.0, 0.5, 0, 3), 0.05, 1e-15);
}
END_TEST

START_TEST(test_clip_values)
{
    /* |(3,4)| = 5, |(12)| = 12: total 13; max_norm 6.5 halves every grad */
    float a[2] = {3, 4}, b[1] = {12};
    int64_t s2 = 2, s1 = 1;
    struct tensor *g[3] = {tensor_from_f32(1, &s2, a), NULL, tensor_from_f32(1, &s1, b)};
    double total = 0;
    ck_assert_int_eq(optim_clip_grad_norm(3, g, 6.5, &total), 0);
    ck_assert_double_eq_tol(total, 13.0, 1e-6);
    ck_assert_float_eq_tol(tensor_f32(g[0])[0], 1.5f, 1e-6f);
    ck_assert_float_eq_tol(tensor_f32(g[0])[1], 2.0f, 1e-6f);
    ck_assert_float_eq_tol(tensor_f32(g[2])[0], 6.0f, 1e-6f);
    /* below the threshold nothing changes */
    ck_assert_int_eq(optim_clip_grad_norm(3, g, 100.0, &total), 0);
    ck_assert_double_eq_tol(total, 6.5, 1e-6);
    ck_assert_float_eq_tol(tensor_f32(g[2])[0], 6.0f, 1e-6f);
    ck_assert_int_eq(optim_clip_grad_norm(3, g, -1.0, &total), -1);
    ck_assert_str_eq(optim_last_error(), "optim_clip_grad_norm: invalid max_norm -1 (must be >= 0)");
    struct tensor *none[2] = {NULL, NULL};
    total = -1;
    ck_assert_int_eq(optim_clip_grad_norm(2, none, 1.0, &total), 0);
    ck_assert_double_eq(total, 0.0);
    tensor_free(g[0]);
    tensor_free(g[2]);
}
END_TEST

/* ---- state save / restore ----------------------------------------------- */

/* Runs `name` for `split` steps, saves, and finishes the trajectory in a
 * second optimizer (fresh params with the same values) restored from the
 * saved state; both must end bit-identical and match the fixture. */
static void check_resume(const char *name, int split, bool via_file)
{
    struct replay a, b;
    replay_init(&a, name);
    replay_init(&b, name);
    for (int s = 0; s < split; s++) replay_step(&a, s);
    uint8_t *state;
    size_t len;
    char path[] = "/tmp/test_optim_state_XXXXXX";
    if (via_file) {
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(optim_save_file(a.opt, path), 0);
        /* a failed save names the path and leaves the saved file as it was */
        char bad[64];
        snprintf(bad, sizeof bad, "%s.missing/state", path);
        ck_assert_int_eq(optim_save_file(a.opt, bad), -1);
        char want[160];
        snprintf(want, sizeof want, "optim_save_file: %s: No such file or directory", bad);
        ck_assert_str_eq(optim_last_error(), want);
    } else {
        ck_assert_int_eq(optim_save(a.opt, &state, &len), 0);
    }
    /* b: different lr before loading; load restores the saved lr */
    optim_set_lr(b.opt, 123.0);
    for (int i = 0; i < NP; i++)
        memcpy(tensor_mutable_data(b.params[i]), tensor_f32(a.params[i]), tensor_nbytes(a.params[i]));
    if (via_file) {
        ck_assert_msg(optim_load_file(b.opt, path) == 0, "%s", optim_last_error());
        unlink(path);
    } else {
        ck_assert_msg(optim_load(b.opt, state, len) == 0, "%s", optim_last_error());
        free(state);
    }
    ck_assert_double_eq(optim_get_lr(b.opt), optim_get_lr(a.opt));
    for (int s = split; s < a.steps; s++) {
        replay_step(&a, s);
        replay_step(&b, s);
    }
    for (int i = 0; i < NP; i++) {
        ck_assert_int_eq(optim_param_steps(a.opt, i), optim_param_steps(b.opt, i));
        ck_assert_mem_eq(tensor_f32(a.params[i]), tensor_f32(b.params[i]), tensor_nbytes(a.params[i]));
    }
    replay_free(&a);
    replay_free(&b);
}

START_TEST(test_resume_adam) { check_resume("adam_wd_skip", 10, false); }
END_TEST
START_TEST(test_resume_rmsprop) { check_resume("rmsprop_centered_momentum", 7, false); }
END_TEST
START_TEST(test_resume_sgd_file) { check_resume("sgd_nesterov_wd", 12, true); }
END_TEST
START_TEST(test_resume_amsgrad_schedule)
{
    check_resume("adam_amsgrad", 1, false);
    check_resume("adam_linear_decay", 13, true);
}
END_TEST

/* Bad states are rejected with an exact message and leave the optimizer
 * exactly as it was (it still follows the reference afterwards). */
START_TEST(test_load_rejects)
{
    struct replay r;
    replay_init(&r, "adam");
    for (int s = 0; s < 5; s++) replay_step(&r, s);
    uint8_t *st;
    size_t len;
    ck_assert_int_eq(optim_save(r.opt, &st, &len), 0);
    /* header 96 + 2 params x (16 + 2 bufs x numel x 4) + 8 */
    ck_assert_uint_eq(len, 96 + (16 + 2 * 3 * 4) + (16 + 2 * 6 * 4) + 8);
    uint8_t *bad = malloc(len + 4);
    char msg[256];

    ck_assert_int_eq(optim_load(r.opt, st, len - 1), -1);
    snprintf(msg, sizeof msg, "optim_load: state is truncated (%zu bytes, expected %zu)", len - 1, len);
    ck_assert_str_eq(optim_last_error(), msg);

    ck_assert_int_eq(optim_load(r.opt, st, 40), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: state is truncated (40 bytes, the header alone is 104)");

    memcpy(bad, st, len);
    memset(bad + len, 0, 4);
    ck_assert_int_eq(optim_load(r.opt, bad, len + 4), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: 4 trailing bytes after the state");

    memcpy(bad, st, len);
    bad[0] = 'X';
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: bad magic: not an optimizer state");

    memcpy(bad, st, len);
    bad[8] = 9;
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: unsupported state format version 9 (expected 1)");

    memcpy(bad, st, len);
    bad[12] = OPTIM_RMSPROP;
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: state is for rmsprop but this optimizer is adam");

    memcpy(bad, st, len);
    bad[16] = 3;
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: state has 3 parameters but this optimizer has 2");

    memcpy(bad, st, len);
    double beta1 = 0.5;
    memcpy(bad + 24 + 4 * 8, &beta1, 8);
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(),
                     "optim_load: hyper-parameter beta1 is 0.5 in the state but 0.9 in this optimizer");

    memcpy(bad, st, len);
    bad[96] = 4;   /* numel of param 0: 3 -> 4 */
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: parameter 0 has 4 elements in the state but 3 here");

    memcpy(bad, st, len);
    bad[96 + 16 + 5] ^= 0x40;   /* a moment value */
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: checksum mismatch: the state is corrupt");

    ck_assert_int_eq(optim_load_file(r.opt, "/nonexistent/dir/state.bin"), -1);
    ck_assert_str_eq(optim_last_error(),
                     "optim_load_file: cannot open /nonexistent/dir/state.bin: No such file or directory");

    /* nothing above changed r: it still follows torch */
    for (int s = 5; s < r.steps; s++) replay_step(&r, s);
    free(bad);
    free(st);
    replay_free(&r);
}
END_TEST

/* Rewrites the FNV-1a 64 trailer (optim.h) after an edit, so the fields
 * behind the checksum are checked on their own. */
static void reseal(uint8_t *buf, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len - 8; i++) {
        h ^= buf[i];
        h *= 0x100000001b3ull;
    }
    memcpy(buf + len - 8, &h, 8);
}

/* A state whose checksum holds but whose values no optimizer could have
 * saved (a negative step count, a learning rate optim_new would refuse)
 * is rejected, and the optimizer keeps its own state. */
START_TEST(test_load_rejects_bad_values)
{
    struct replay r;
    replay_init(&r, "adam");
    for (int s = 0; s < 3; s++) replay_step(&r, s);
    uint8_t *st;
    size_t len;
    ck_assert_int_eq(optim_save(r.opt, &st, &len), 0);
    uint8_t *bad = malloc(len);
    double lr_before = optim_get_lr(r.opt);

    memcpy(bad, st, len);
    int64_t steps = -5;
    memcpy(bad + 96 + 8, &steps, 8);
    reseal(bad, len);
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: parameter 0 has a negative step count -5");
    steps = INT64_MAX;   /* the next step would overflow it */
    memcpy(bad + 96 + 8, &steps, 8);
    reseal(bad, len);
    ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
    ck_assert_str_eq(optim_last_error(), "optim_load: parameter 0 has a step count 9223372036854775807 with no step left");

    const double lrs[2] = {-1.0, NAN};
    const char *want[2] = {"optim_load: invalid learning rate -1 in the state (must be >= 0)",
                           "optim_load: invalid learning rate nan in the state (must be >= 0)"};
    for (int k = 0; k < 2; k++) {
        memcpy(bad, st, len);
        memcpy(bad + 24, &lrs[k], 8);
        reseal(bad, len);
        ck_assert_int_eq(optim_load(r.opt, bad, len), -1);
        ck_assert_str_eq(optim_last_error(), want[k]);
        ck_assert(optim_get_lr(r.opt) == lr_before);
    }
    /* the untouched state still loads, and r still follows torch */
    memcpy(bad, st, len);
    reseal(bad, len);
    ck_assert_int_eq(optim_load(r.opt, bad, len), 0);
    for (int s = 3; s < r.steps; s++) replay_step(&r, s);
    free(bad);
    free(st);
    replay_free(&r);
}
END_TEST

START_TEST(test_load_rejects_config)
{
    struct replay r;
    replay_init(&r, "adam");
    uint8_t *st;
    size_t len;
    ck_assert_int_eq(optim_save(r.opt, &st, &len), 0);
    struct optim_hyper h = r.h;
    h.amsgrad = true;
    struct optim *other = optim_new(OPTIM_ADAM, &h, NP, r.params);
    ck_assert_int_eq(optim_load(other, st, len), -1);
    ck_assert_str_eq(optim_last_error(),
                     "optim_load: flags (nesterov/amsgrad/centered) are 0 in the state but 2 in this optimizer");
    optim_free(other);
    free(st);
    replay_free(&r);
}
END_TEST

/* ---- copy-on-write ------------------------------------------------------ */

START_TEST(test_cow_snapshot_keeps_old_values)
{
    struct replay r;
    replay_init(&r, "sgd_momentum");
    replay_step(&r, 0);
    float before[6];
    memcpy(before, tensor_f32(r.params[1]), sizeof before);
    struct tensor *snap = tensor_snapshot(r.params[1]);   /* what a live graph saves */
    uint64_t v0 = snap->saved_version;
    replay_step(&r, 1);                                   /* checks the new values */
    ck_assert_mem_eq(tensor_f32(snap), before, sizeof before);
    ck_assert_ptr_ne(tensor_data(snap), tensor_data(r.params[1]));
    ck_assert_uint_eq(atomic_load(&snap->storage->version), v0);
    ck_assert_uint_gt(atomic_load(&r.params[1]->storage->version), v0);
    tensor_free(snap);
    for (int s = 2; s < r.steps; s++) replay_step(&r, s);
    replay_free(&r);
}
END_TEST

/* A graph recorded before a step differentiates through the old weights:
 * d sum(x w) / dx = w^T as it was at forward time. */
START_TEST(test_cow_live_graph_uses_old_weights)
{
    int64_t xs[2] = {1, 3}, ws[2] = {3, 1};
    float xv[3] = {1, 2, 3}, wv[3] = {0.5f, -1.0f, 2.0f}, ones[3] = {1, 1, 1};
    struct tensor *x = tensor_from_f32(2, xs, xv), *w = tensor_from_f32(2, ws, wv);
    tensor_set_requires_grad(x, true);
    tensor_set_requires_grad(w, true);
    struct tensor *y = tensor_matmul(x, w), *loss = tensor_sum(y);
    ck_assert_ptr_nonnull(loss);
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 1.0;
    struct optim *o = optim_new(OPTIM_SGD, &h, 1, &w);
    struct tensor *g = tensor_from_f32(2, ws, ones);
    ck_assert_int_eq(optim_step(o, &g), 0);
    ck_assert_float_eq(tensor_f32(w)[0], -0.5f);   /* the param moved ... */
    ck_assert_msg(tensor_backward(loss, NULL, false) == 0, "%s", tensor_last_error());
    for (int i = 0; i < 3; i++) ck_assert_float_eq(tensor_f32(x->grad)[i], wv[i]);   /* ... the graph did not */
    tensor_free(g);
    optim_free(o);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    tensor_free(w);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

START_TEST(test_step_rejects_bad_grads)
{
    struct replay r;
    replay_init(&r, "adam");
    float before[6];
    memcpy(before, tensor_f32(r.params[1]), sizeof before);
    int64_t s32[2] = {3, 2}, s3 = 3;
    struct tensor *g0 = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &s3);
    struct tensor *wrong = tensor_new(DTYPE_F32, DEVICE_CPU, 2, s32);
    struct tensor *grads[NP] = {g0, wrong};
    ck_assert_int_eq(optim_step(r.opt, grads), -1);
    ck_assert_str_eq(optim_last_error(), "optim_step: grads[1] has shape [3,2] but params[1] has shape [2,3]");
    ck_assert_int_eq(optim_param_steps(r.opt, 0), 0);
    ck_assert_mem_eq(tensor_f32(r.params[1]), before, sizeof before);
    struct tensor *i64 = tensor_new(DTYPE_I64, DEVICE_CPU, 1, &s3);
    grads[0] = i64;
    grads[1] = NULL;
    ck_assert_int_eq(optim_step(r.opt, grads), -1);
    ck_assert_str_eq(optim_last_error(), "optim_step: grads[0] is i64, expected f32");
    ck_assert_int_eq(optim_step(r.opt, NULL), -1);
    ck_assert_str_eq(optim_last_error(), "optim_step: grads is NULL");
    tensor_free(g0);
    tensor_free(wrong);
    tensor_free(i64);
    /* the rejected steps left the state alone: the trajectory still matches */
    for (int s = 0; s < r.steps; s++) replay_step(&r, s);
    replay_free(&r);
}
END_TEST

START_TEST(test_new_rejects_bad_config)
{
    int64_t s3 = 3;
    struct tensor *p = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &s3);
    struct tensor *q = tensor_new(DTYPE_F64, DEVICE_CPU, 1, &s3);
    struct tensor *ps[2] = {p, q};
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.nesterov = true;
    ck_assert_ptr_null(optim_new(OPTIM_SGD, &h, 1, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: nesterov momentum requires a momentum and zero dampening");
    h = optim_defaults(OPTIM_SGD);
    h.lr = -0.1;
    ck_assert_ptr_null(optim_new(OPTIM_SGD, &h, 1, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: invalid learning rate -0.1 (must be >= 0)");
    h = optim_defaults(OPTIM_ADAM);
    h.beta2 = 1.0;
    ck_assert_ptr_null(optim_new(OPTIM_ADAM, &h, 1, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: invalid beta2 1 (must be in [0, 1))");
    h = optim_defaults(OPTIM_RMSPROP);
    ck_assert_ptr_null(optim_new(OPTIM_RMSPROP, &h, 2, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: params[1] is f64, expected f32");
    ck_assert_ptr_null(optim_new(OPTIM_RMSPROP, &h, 0, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: need at least one parameter (n = 0)");
    struct tensor *twice[2] = {p, p};
    ck_assert_ptr_null(optim_new(OPTIM_RMSPROP, &h, 2, twice));
    ck_assert_str_eq(optim_last_error(), "optim_new: params[1] is the same tensor as params[0]");
    ck_assert_ptr_null(optim_new((enum optim_kind)9, &h, 1, ps));
    ck_assert_str_eq(optim_last_error(), "optim_new: invalid optimizer kind 9");
    optim_free(NULL);
    tensor_free(p);
    tensor_free(q);
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("trajectories");
    tcase_add_test(tc, test_sgd_plain);
    tcase_add_test(tc, test_sgd_momentum);
    tcase_add_test(tc, test_sgd_nesterov_wd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adam_wd_skip);
    tcase_add_test(tc, test_adam_amsgrad);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_rmsprop);
    tcase_add_test(tc, test_rmsprop_centered_momentum);
    suite_add_tcase(s, tc);
    tc = tcase_create("clip_and_schedule");
    tcase_add_test(tc, test_clip_grad_norm);
    tcase_add_test(tc, test_clip_values);
    tcase_add_test(tc, test_linear_warmup);
    tcase_add_test(tc, test_linear_decay);
    tcase_add_test(tc, test_lr_linear_edges);
    suite_add_tcase(s, tc);
    tc = tcase_create("state");
    tcase_add_test(tc, test_resume_adam);
    tcase_add_test(tc, test_resume_rmsprop);
    tcase_add_test(tc, test_resume_sgd_file);
    tcase_add_test(tc, test_resume_amsgrad_schedule);
    tcase_add_test(tc, test_load_rejects);
    tcase_add_test(tc, test_load_rejects_config);
    tcase_add_test(tc, test_load_rejects_bad_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("cow_and_errors");
    tcase_add_test(tc, test_cow_snapshot_keeps_old_values);
    tcase_add_test(tc, test_cow_live_graph_uses_old_weights);
    tcase_add_test(tc, test_step_rejects_bad_grads);
    tcase_add_test(tc, test_new_rejects_bad_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = kit_run_suite(optim_suite());
    cJSON_Delete(fixtures);
    return rc;
}
