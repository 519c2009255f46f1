/* Distributed checkpoints (optim/dist_ckpt.h) in a world of three: w0
 * drives a model split over w1 (Linear 4->3) and w2 (Linear 3->2) trained
 * with Adam through a distributed optimizer. A save writes one shard per
 * owner and a manifest; resuming from it ends bit-identical to the run that
 * went on; a missing, corrupted or mismatched shard, a missing or extra
 * module, a module on another worker and a failed save are each refused by
 * name and change nothing. */
#include <dirent.h>
#include <sys/stat.h>

#include "dist_harness.h"
#include "optim/dist_ckpt.h"
#include "kit.h"

enum { STEPS = 5 };

/* The owners' checkpoint root (dist_ckpt_add_root): each test's directory,
 * made before the world is forked. */
static const char *ckpt_root;
static void register_ckpt(void)
{
    dist_ckpt_init();
    ck_assert_int_eq(dist_ckpt_add_root(ckpt_root), 0);
}

struct model {
    struct remote_module *a, *b;
    struct dist_optim *opt;
    struct dist_ckpt_module mods[2];
};

static struct remote_module *linear_at(const char *where, int in, int out)
{
    struct rpc_value a = rpc_list(2);
    a.list.items[0] = rpc_int(in);
    a.list.items[1] = rpc_int(out);
    struct remote_module *m = remote_module_new_at(where, "linear", &a);
    rpc_value_clear(&a);
    ck_assert_msg(m != NULL, "%s", rpc_last_error());
    return m;
}

static void model_new(struct model *m, const char *b_where, int b_out)
{
    m->a = linear_at("w1/cpu", 4, 3);
    m->b = linear_at(b_where, 3, b_out);
    struct rref *p[4];
    ck_assert_int_eq(remote_module_parameters(m->a, p, 2), 2);
    ck_assert_int_eq(remote_module_parameters(m->b, p + 2, 2), 2);
    struct optim_hyper h = optim_defaults(OPTIM_ADAM);
    h.lr = 0.05;
    m->opt = dist_optim_new(OPTIM_ADAM, &h, 4, p);
    ck_assert_msg(m->opt != NULL, "%s", rpc_last_error());
    for (int i = 0; i < 4; i++) rref_free(p[i]);
    m->mods[0] = (struct dist_ckpt_module){ "a", m->a };
    m->mods[1] = (struct dist_ckpt_module){ "b", m->b };
}

static void model_free(struct model *m)
{
    dist_optim_free(m->opt);
    remote_module_free(m->a);
    remote_module_free(m->b);
}

static void train(struct model *m, int steps, uint32_t seed)
{
    for (int s = 0; s < steps; s++) {
        struct tensor *x = dh_random(8, 4, seed + (uint32_t)s), *t = dh_random(8, 2, 100 + seed + (uint32_t)s);
        int64_t ctx = dist_autograd_context_new();
        struct tensor *h = NULL, *y = NULL, *out[NN_MAX_IO];
        int n;
        ck_assert_int_eq(remote_module_forward(m->a, 1, &x, &n, out), 0);
        h = out[0];
        ck_assert_int_eq(remote_module_forward(m->b, 1, &h, &n, out), 0);
        y = out[0];
        struct tensor *loss = tensor_mse(y, t);
        ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "%s", rpc_last_error());
        ck_assert_msg(dist_optim_step(m->opt, ctx) == 0, "%s", rpc_last_error());
        dist_autograd_release(ctx);
        tensor_free(loss);
        tensor_free(y);
        tensor_free(h);
        tensor_free(x);
        tensor_free(t);
    }
}

/* Every parameter of the model, fetched, in one buffer (caller frees). */
static float *params_of(struct model *m, size_t *n)
{
    float *all = NULL;
    *n = 0;
    struct remote_module *ms[2] = { m->a, m->b };
    for (int k = 0; k < 2; k++) {
        struct rref *p[2];
        ck_assert_int_eq(remote_module_parameters(ms[k], p, 2), 2);
        for (int i = 0; i < 2; i++) {
            struct rpc_value v = rpc_nil();
            ck_assert_int_eq(rref_to_here(p[i], &v, 0), 0);
            all = realloc(all, (*n + (size_t)v.tensor->numel) * sizeof *all);
            memcpy(all + *n, tensor_f32(v.tensor), tensor_nbytes(v.tensor));
            *n += (size_t)v.tensor->numel;
            rpc_value_clear(&v);
            rref_free(p[i]);
        }
    }
    return all;
}

static bool exists(const char *dir, const char *file)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return access(p, F_OK) == 0;
}

static int count_shards(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strncmp(e->d_name, "shard-", 6) == 0;
    if (d) closedir(d);
    return n;
}

START_TEST(resume_equals_uninterrupted)
{
    char dir[] = "/tmp/trib-dist-ckpt-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ckpt_root = dir;
    dh_extra_register = register_ckpt;
    dh_start(3, NULL, NULL);
    struct model m;
    model_new(&m, "w2/cpu", 2);
    train(&m, STEPS, 1);
    size_t n0, n1, n2;
    float *at_save = params_of(&m, &n0);
    ck_assert_msg(dist_ckpt_save(dir, 2, m.mods, m.opt, 42) == 0, "%s", rpc_last_error());
    ck_assert(exists(dir, "MANIFEST") && exists(dir, "shard-1-w1.bin") && exists(dir, "shard-1-w2.bin"));
    ck_assert_int_eq(count_shards(dir), 2);
    train(&m, STEPS, 50);
    float *uninterrupted = params_of(&m, &n1);

    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(dir, 2, m.mods, m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 42);
    float *loaded = params_of(&m, &n2);
    ck_assert(n2 == n0 && memcmp(loaded, at_save, n0 * sizeof *loaded) == 0);
    train(&m, STEPS, 50);
    float *resumed = params_of(&m, &n2);
    ck_assert(n2 == n1);
    ck_assert_msg(memcmp(resumed, uninterrupted, n1 * sizeof *resumed) == 0, "resumed run differs from the uninterrupted one");
    ck_assert_msg(memcmp(resumed, at_save, n1 * sizeof *resumed) != 0, "training did not move the parameters");

    /* A second save: generation 2, the first generation's shards removed. */
    ck_assert_msg(dist_ckpt_save(dir, 2, m.mods, m.opt, 43) == 0, "%s", rpc_last_error());
    ck_assert(exists(dir, "shard-2-w1.bin") && exists(dir, "shard-2-w2.bin") && !exists(dir, "shard-1-w1.bin"));
    ck_assert_int_eq(count_shards(dir), 2);
    free(at_save);
    free(uninterrupted);
    free(loaded);
    free(resumed);
    model_free(&m);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    dh_stop();
}
END_TEST

START_TEST(refusals)
{
    char dir[] = "/tmp/trib-dist-ckpt-XXXXXX", msg[1024], path[600];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ckpt_root = dir;
    dh_extra_register = register_ckpt;
    dh_start(3, NULL, NULL);
    struct model m;
    model_new(&m, "w2/cpu", 2);
    train(&m, 2, 1);

    ck_assert_int_eq(dist_ckpt_load(dir, 2, m.mods, m.opt, NULL), -1);
    snprintf(msg, sizeof msg, "dist_ckpt_load: %s/MANIFEST: No such file or directory", dir);
    ck_assert_str_eq(rpc_last_error(), msg);

    ck_assert_msg(dist_ckpt_save(dir, 2, m.mods, m.opt, 7) == 0, "%s", rpc_last_error());
    size_t n0, n;
    float *saved = params_of(&m, &n0);
    train(&m, 2, 9);
    float *before = params_of(&m, &n);

    /* modules: one not in the checkpoint, one left out, one given twice */
    struct dist_ckpt_module other[2] = { { "a", m.a }, { "c", m.b } };
    ck_assert_int_eq(dist_ckpt_load(dir, 2, other, m.opt, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: module 'c' is not in the checkpoint");
    ck_assert_int_eq(dist_ckpt_load(dir, 1, m.mods, NULL, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: the checkpoint holds module 'b', which was not given");
    struct dist_ckpt_module twice[2] = { { "a", m.a }, { "a", m.b } };
    ck_assert_int_eq(dist_ckpt_save(dir, 2, twice, NULL, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_save: module 'a' given twice");
    struct dist_ckpt_module spaced[1] = { { "a b", m.a } };
    ck_assert_int_eq(dist_ckpt_save(dir, 1, spaced, NULL, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_save: module 0: a name is 1-63 printable characters without spaces");

    /* a module built elsewhere, or with another shape */
    struct model moved;
    model_new(&moved, "w1/cpu", 2);
    ck_assert_int_eq(dist_ckpt_load(dir, 2, moved.mods, NULL, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: module 'b' was saved on w2, it is now on w1");
    model_free(&moved);
    struct model wide;
    model_new(&wide, "w2/cpu", 5);
    ck_assert_int_eq(dist_ckpt_load(dir, 2, wide.mods, NULL, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: w2: module 'b' parameter 0: f32 [2,3] in the checkpoint, f32 [5,3] here");
    ck_assert_int_eq(dist_ckpt_load(dir, 2, wide.mods, wide.opt, NULL), -1);   /* shapes are checked before the optimizer */
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: w2: module 'b' parameter 0: f32 [2,3] in the checkpoint, f32 [5,3] here");
    model_free(&wide);

    /* a corrupted shard, then a missing one: refused, and nothing changed
     * anywhere (w2's shard was fine, but nothing is applied before every
     * shard is checked) */
    snprintf(path, sizeof path, "%s/shard-1-w1.bin", dir);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    ck_assert_int_eq(dist_ckpt_load(dir, 2, m.mods, m.opt, NULL), -1);
    const char *want = "dist_ckpt_load: w1: shard shard-1-w1.bin does not match the manifest (";
    ck_assert_msg(strncmp(rpc_last_error(), want, strlen(want)) == 0, "%s", rpc_last_error());
    ck_assert_msg(strstr(rpc_last_error(), "; the manifest says ") != NULL, "%s", rpc_last_error());
    float *after = params_of(&m, &n);
    ck_assert(memcmp(after, before, n * sizeof *after) == 0);
    free(after);
    snprintf(path, sizeof path, "%s/shard-1-w2.bin", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(dist_ckpt_load(dir, 2, m.mods, m.opt, NULL), -1);
    /* w1's corrupted shard or w2's missing one: each owner answers for its own */
    ck_assert_msg(strcmp(rpc_last_error(), "dist_ckpt_load: w2: shard shard-1-w2.bin is missing") == 0 ||
                  strncmp(rpc_last_error(), want, strlen(want)) == 0, "%s", rpc_last_error());

    /* A fresh save, then one that fails on w2 (its shard's path is taken by
     * a directory): refused naming w2, and the previous checkpoint still loads. */
    ck_assert_msg(dist_ckpt_save(dir, 2, m.mods, m.opt, 8) == 0, "%s", rpc_last_error());
    free(saved);
    saved = params_of(&m, &n0);
    snprintf(path, sizeof path, "%s/shard-3-w2.bin", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    train(&m, 1, 20);
    ck_assert_int_eq(dist_ckpt_save(dir, 2, m.mods, m.opt, 9), -1);
    snprintf(msg, sizeof msg, "dist_ckpt_save: w2: %s/shard-3-w2.bin: Is a directory", dir);
    ck_assert_str_eq(rpc_last_error(), msg);
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(dir, 2, m.mods, m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 8);
    after = params_of(&m, &n);
    ck_assert(n == n0 && memcmp(after, saved, n * sizeof *after) == 0);
    free(after);
    free(saved);
    free(before);
    model_free(&m);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_ckpt",
         { "ckpt", 120, .tests = { resume_equals_uninterrupted, refusals } })
