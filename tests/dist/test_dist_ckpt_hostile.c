/* A hostile member against distributed checkpoints (issue 24, N5-N10): w0
 * is a legitimate member of a world of three and calls the owners' RPC
 * function "dist_ckpt._shard" directly, as the attacker did, or hands
 * dist_ckpt_load a doctored MANIFEST. The owners (w1, w2) configured one
 * checkpoint root (dist_ckpt_add_root); a second directory beside it is
 * "outside". Each test asserts the exact refusal, that nothing outside
 * changed, and that the owner still answers. */
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>

#include "dist_harness.h"
#include "optim/dist_ckpt.h"
#include "kit.h"

/* The owners' root, chosen before the world is forked (NULL: none). */
static const char *ckpt_root;
static void register_ckpt(void)
{
    dist_ckpt_init();
    if (ckpt_root) ck_assert_int_eq(dist_ckpt_add_root(ckpt_root), 0);
}

struct model {
    struct remote_module *a, *b;
    struct dist_optim *opt;
    struct dist_ckpt_module mods[2];
};

/* root: the owners' root; out: a directory outside it; ck: root/ck, a
 * checkpoint directory. */
struct env {
    char root[64], out[64], ck[128];
    struct model m;
};

static struct remote_module *linear_on(const char *where, int in, int out)
{
    struct rpc_value a = rpc_list(2);
    a.list.items[0] = rpc_int(in);
    a.list.items[1] = rpc_int(out);
    struct remote_module *m = remote_module_new(where, "linear", &a, DEVICE_CPU);
    rpc_value_clear(&a);
    ck_assert_msg(m != NULL, "%s", rpc_last_error());
    return m;
}

static void model_new(struct model *m, const char *a_on, const char *b_on, bool with_opt)
{
    m->a = linear_on(a_on, 4, 3);
    m->b = linear_on(b_on, 3, 2);
    m->opt = NULL;
    if (with_opt) {
        struct rref *p[4];
        ck_assert_int_eq(remote_module_parameters(m->a, p, 2), 2);
        ck_assert_int_eq(remote_module_parameters(m->b, p + 2, 2), 2);
        struct optim_hyper h = optim_defaults(OPTIM_ADAM);
        m->opt = dist_optim_new(OPTIM_ADAM, &h, 4, p);
        ck_assert_msg(m->opt != NULL, "%s", rpc_last_error());
        for (int i = 0; i < 4; i++) rref_free(p[i]);
    }
    m->mods[0] = (struct dist_ckpt_module){ "a", m->a };
    m->mods[1] = (struct dist_ckpt_module){ "b", m->b };
}

static void model_free(struct model *m)
{
    if (m->opt) dist_optim_free(m->opt);
    remote_module_free(m->a);
    remote_module_free(m->b);
}

/* Makes root, out and ck, starts the world (the owners' root: root, or
 * none), and builds a model on w1 and w2. */
static void env_start(struct env *e, bool owners_have_root, int w0_timeout_ms)
{
    snprintf(e->root, sizeof e->root, "/tmp/trib-ckh-root-XXXXXX");
    snprintf(e->out, sizeof e->out, "/tmp/trib-ckh-out-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(e->root));
    ck_assert_ptr_nonnull(mkdtemp(e->out));
    snprintf(e->ck, sizeof e->ck, "%s/ck", e->root);
    ck_assert_int_eq(mkdir(e->ck, 0755), 0);
    ckpt_root = owners_have_root ? e->root : NULL;
    dh_w0_timeout_ms = w0_timeout_ms;
    dh_extra_register = register_ckpt;
    dh_start(3, NULL, NULL);
    model_new(&e->m, "w1", "w2", true);
}

static void env_stop(struct env *e)
{
    model_free(&e->m);
    dh_stop();
    ck_assert_int_eq(kit_rm_rf(e->root), 0);
    ck_assert_int_eq(kit_rm_rf(e->out), 0);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void path_of(char *out, size_t cap, const char *dir, const char *file)
{
    snprintf(out, cap, "%s/%s", dir, file);
}

static bool exists(const char *dir, const char *file)
{
    char p[512];
    path_of(p, sizeof p, dir, file);
    struct stat st;
    return lstat(p, &st) == 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Replaces the first `from` in dir/MANIFEST by `to`. */
static void edit_manifest(const char *dir, const char *from, const char *to)
{
    char p[512];
    path_of(p, sizeof p, dir, "MANIFEST");
    char *t = kit_read_file(p, NULL);
    ck_assert_ptr_nonnull(t);
    char *at = strstr(t, from);
    ck_assert_msg(at != NULL, "'%s' not in the manifest:\n%s", from, t);
    size_t head = (size_t)(at - t), nf = strlen(from), nt = strlen(to), rest = strlen(at + nf);
    char *u = malloc(head + nt + rest + 1);
    memcpy(u, t, head);
    memcpy(u + head, to, nt);
    memcpy(u + head + nt, at + nf, rest + 1);
    write_file(p, u, strlen(u));
    free(u);
    free(t);
}

/* Calls to's dist_ckpt._shard(op, path, size, hash, [[name, mod]], nil)
 * directly, as any member can. 0 or -1; err: the error text ("" on 0). */
static int shard_call(const char *to, const char *op, const char *path, int64_t size, uint64_t hash,
                      struct remote_module *mod, const char *name, char *err, size_t cap)
{
    struct rpc_value a = rpc_list(6);
    a.list.items[0] = rpc_str(op);
    a.list.items[1] = rpc_str(path);
    a.list.items[2] = rpc_int(size);
    a.list.items[3] = rpc_int((int64_t)hash);
    a.list.items[4] = rpc_list(mod ? 1 : 0);
    if (mod) {
        struct rpc_value e = rpc_list(2);
        e.list.items[0] = rpc_str(name);
        e.list.items[1] = rpc_rref(remote_module_rref(mod));
        a.list.items[4].list.items[0] = e;
    }
    struct rpc_value res = rpc_nil();
    int rc = rpc_sync(to, "dist_ckpt._shard", &a, &res, 0);
    snprintf(err, cap, "%s", rc ? rpc_last_error() : "");
    rpc_value_clear(&a);
    rpc_value_clear(&res);
    return rc;
}

/* The owner still answers another call, at once. */
static void assert_answers(const char *who)
{
    ck_assert_int_ge(dh_remote_nctx(who), 0);
}

/* N8: save writes only the owner's own shard, only in an allowed
 * directory; check says nothing about a file elsewhere. */
START_TEST(save_outside_refused)
{
    struct env e;
    env_start(&e, true, 30000);
    char victim[256], p[512], err[1024], want[1024];
    path_of(victim, sizeof victim, e.out, "victim.txt");
    write_file(victim, "precious\n", 9);

    /* any path: refused by its name */
    ck_assert_int_eq(shard_call("w1", "save", victim, 0, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'victim.txt' is not a shard name of w1 (shard-<generation>-w1.bin)");
    /* a shard's name, outside the root: refused by its directory */
    path_of(p, sizeof p, e.out, "shard-1-w1.bin");
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    snprintf(want, sizeof want, "rpc: w1: dist_ckpt._shard: %s is not a checkpoint directory of w1 (see dist_ckpt_add_root)", e.out);
    ck_assert_str_eq(err, want);
    /* out of the root by "..": refused before the file system is asked */
    char *out_base = strrchr(e.out, '/') + 1;
    snprintf(p, sizeof p, "%s/../%s/shard-1-w1.bin", e.root, out_base);
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    snprintf(want, sizeof want, "rpc: w1: dist_ckpt._shard: '%s/../%s' is not a clean absolute directory", e.root, out_base);
    ck_assert_str_eq(err, want);
    /* out of the root through a link inside it */
    char link[256];
    path_of(link, sizeof link, e.root, "link");
    ck_assert_int_eq(symlink(e.out, link), 0);
    path_of(p, sizeof p, link, "shard-1-w1.bin");
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    snprintf(want, sizeof want, "rpc: w1: dist_ckpt._shard: %s: a symbolic link on the way (links are not followed)", link);
    ck_assert_str_eq(err, want);
    /* another worker's shard, in the root */
    path_of(p, sizeof p, e.ck, "shard-1-w2.bin");
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'shard-1-w2.bin' is not a shard name of w1 (shard-<generation>-w1.bin)");
    ck_assert(!exists(e.ck, "shard-1-w2.bin"));

    /* outside: only the victim, unchanged */
    size_t n;
    char *v = kit_read_file(victim, &n);
    ck_assert(v != NULL && n == 9 && memcmp(v, "precious\n", 9) == 0);
    free(v);
    ck_assert_int_eq(count_entries(e.out), 1);

    /* check of a file elsewhere: no size, no hash */
    ck_assert_int_eq(shard_call("w1", "check", "/etc/shadow", 0, 0, NULL, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'shadow' is not a shard name of w1 (shard-<generation>-w1.bin)");
    path_of(p, sizeof p, e.out, "shard-1-w1.bin");
    write_file(p, "secret: 23 bytes long!\n", 23);
    ck_assert_int_eq(shard_call("w1", "check", p, 0, 0, NULL, NULL, err, sizeof err), -1);
    snprintf(want, sizeof want, "rpc: w1: dist_ckpt._shard: %s is not a checkpoint directory of w1 (see dist_ckpt_add_root)", e.out);
    ck_assert_str_eq(err, want);

    /* and the legitimate save in the root works */
    path_of(p, sizeof p, e.ck, "shard-1-w1.bin");
    ck_assert_msg(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err) == 0, "%s", err);
    ck_assert(exists(e.ck, "shard-1-w1.bin"));
    ck_assert_int_eq(count_entries(e.ck), 1);    /* no temporary file left */
    assert_answers("w1");
    env_stop(&e);
}
END_TEST

/* N8 inside the root: a member cannot replace a shard of the checkpoint
 * there (here with one that holds no module, which would make it
 * unloadable); only a newer generation may be written. */
START_TEST(checkpoint_shard_not_replaced)
{
    struct env e;
    env_start(&e, true, 30000);
    char p[512], err[1024];
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 1) == 0, "%s", rpc_last_error());
    path_of(p, sizeof p, e.ck, "shard-1-w1.bin");
    size_t n0, n1;
    char *before = kit_read_file(p, &n0);
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, NULL, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: shard shard-1-w1.bin: generation 1 is not newer than the directory's checkpoint (generation 1)");
    char *after = kit_read_file(p, &n1);
    ck_assert(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 1);
    /* the next generation may be written (the caller's next save does) */
    path_of(p, sizeof p, e.ck, "shard-2-w1.bin");
    ck_assert_msg(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 2) == 0, "%s", rpc_last_error());
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 2);
    env_stop(&e);
}
END_TEST

/* N6: the manifest's shard names are plain, and links are not followed:
 * not as a shard, not as the checkpoint directory. */
START_TEST(load_outside_refused)
{
    struct env e;
    env_start(&e, true, 30000);
    char p[512], err[1024], want[1024];
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 1) == 0, "%s", rpc_last_error());

    /* a MANIFEST naming ../../../../etc/passwd */
    edit_manifest(e.ck, "shard-1-w1.bin", "../../../../etc/passwd");
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    snprintf(want, sizeof want, "dist_ckpt_load: %s/MANIFEST: line 4: shard file '../../../../etc/passwd' of w1 is not shard-1-w1.bin", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    /* the same, straight to the owner */
    path_of(p, sizeof p, e.ck, "../../../../etc/passwd");
    ck_assert_int_eq(shard_call("w1", "check", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'passwd' is not a shard name of w1 (shard-<generation>-w1.bin)");
    edit_manifest(e.ck, "../../../../etc/passwd", "shard-1-w1.bin");

    /* a fresh checkpoint (generation 2) whose w1 shard is a link to a copy
     * of itself outside: the copy is good, but a link is not followed */
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 2) == 0, "%s", rpc_last_error());
    char shard[512], copy[512];
    path_of(shard, sizeof shard, e.ck, "shard-2-w1.bin");
    path_of(copy, sizeof copy, e.out, "copy.bin");
    size_t n;
    char *bytes = kit_read_file(shard, &n);
    ck_assert_ptr_nonnull(bytes);
    write_file(copy, bytes, n);
    free(bytes);
    ck_assert_int_eq(unlink(shard), 0);
    ck_assert_int_eq(symlink(copy, shard), 0);
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: w1: shard shard-2-w1.bin is not a regular file");
    /* a link to another file: the refusal says nothing of it */
    ck_assert_int_eq(unlink(shard), 0);
    ck_assert_int_eq(symlink("/etc/passwd", shard), 0);
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: w1: shard shard-2-w1.bin is not a regular file");
    ck_assert_int_eq(unlink(shard), 0);

    /* the checkpoint directory itself a link (inside the root) to a good
     * checkpoint outside: the caller resolves it, the owners refuse it */
    char good[256], cmd[1024], link[256];
    path_of(good, sizeof good, e.out, "good");
    ck_assert_int_eq(mkdir(good, 0755), 0);
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 3) == 0, "%s", rpc_last_error());
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", e.ck, good);
    ck_assert_int_eq(system(cmd), 0);
    path_of(link, sizeof link, e.root, "link");
    ck_assert_int_eq(symlink(good, link), 0);
    ck_assert_int_eq(dist_ckpt_load(link, 2, e.m.mods, e.m.opt, NULL), -1);
    snprintf(want, sizeof want, "dist_ckpt_load: w1: %s is not a checkpoint directory of w1 (see dist_ckpt_add_root)", good);
    ck_assert_str_eq(rpc_last_error(), want);
    /* the real one still loads */
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 3);
    assert_answers("w1");
    env_stop(&e);
}
END_TEST

/* N5: /dev/zero as a shard, by name or by a link: refused at once, nothing
 * read, the owner alive. (A short RPC timeout: without the fix the owner
 * reads until it dies.) */
START_TEST(dev_zero_refused)
{
    struct env e;
    env_start(&e, true, 10000);
    char p[512], err[1024], want[1024];
    ck_assert_int_eq(shard_call("w1", "check", "/dev/zero", 0, 0, NULL, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'zero' is not a shard name of w1 (shard-<generation>-w1.bin)");
    path_of(p, sizeof p, e.ck, "shard-1-w1.bin");
    ck_assert_int_eq(symlink("/dev/zero", p), 0);
    ck_assert_int_eq(shard_call("w1", "load", p, 1000, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: shard shard-1-w1.bin is not a regular file");
    ck_assert_int_eq(unlink(p), 0);
    /* a MANIFEST naming /dev/zero */
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 1) == 0, "%s", rpc_last_error());
    edit_manifest(e.ck, "shard-1-w1.bin", "/dev/zero");
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    snprintf(want, sizeof want, "dist_ckpt_load: %s/MANIFEST: line 4: shard file '/dev/zero' of w1 is not shard-1-w1.bin", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    assert_answers("w1");
    env_stop(&e);
}
END_TEST

/* N7: a FIFO as a shard is refused at once, however often; the owner's
 * handler threads stay free. */
START_TEST(fifo_refused)
{
    struct env e;
    env_start(&e, true, 10000);
    char p[512], err[1024];
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 1) == 0, "%s", rpc_last_error());
    path_of(p, sizeof p, e.ck, "shard-1-w1.bin");
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
        ck_assert_str_eq(rpc_last_error(), "dist_ckpt_load: w1: shard shard-1-w1.bin is not a regular file");
        ck_assert_int_eq(shard_call("w1", "check", p, 100, 0, e.m.a, "a", err, sizeof err), -1);
        ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: shard shard-1-w1.bin is not a regular file");
    }
    assert_answers("w1");
    /* a save replaces the FIFO (it is not written through) and loads */
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 2) == 0, "%s", rpc_last_error());
    ck_assert(!exists(e.ck, "shard-1-w1.bin"));
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 2);
    env_stop(&e);
}
END_TEST

/* N9: MANIFEST numbers are range-checked: a refused save writes and
 * deletes nothing; the last generation loads but is not saved past. */
START_TEST(numbers_range_checked)
{
    struct env e;
    env_start(&e, true, 30000);
    char p[512], q[512], err[1024], want[1024];
    ck_assert_msg(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 1) == 0, "%s", rpc_last_error());
    edit_manifest(e.ck, "generation 1", "generation 9223372036854775807");
    ck_assert_int_eq(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 2), -1);
    snprintf(want, sizeof want, "dist_ckpt_save: %s/MANIFEST: line 2: generation 9223372036854775807 is out of range 1..999999999999999999", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert(exists(e.ck, "shard-1-w1.bin") && exists(e.ck, "shard-1-w2.bin"));
    ck_assert_int_eq(count_entries(e.ck), 3);
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    snprintf(want, sizeof want, "dist_ckpt_load: %s/MANIFEST: line 2: generation 9223372036854775807 is out of range 1..999999999999999999", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    edit_manifest(e.ck, "generation 9223372036854775807", "generation 1");

    /* sizes and steps */
    edit_manifest(e.ck, "step 1", "step 99999999999999999999");
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    snprintf(want, sizeof want, "dist_ckpt_load: %s/MANIFEST: line 3: step 99999999999999999999 is out of range (64-bit signed)", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    edit_manifest(e.ck, "step 99999999999999999999", "step 1");
    edit_manifest(e.ck, "shard-1-w1.bin ", "shard-1-w1.bin -");
    ck_assert_int_eq(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, NULL), -1);
    ck_assert_msg(strstr(rpc_last_error(), "/MANIFEST: line 4: shard size -") != NULL &&
                  strstr(rpc_last_error(), " is out of range 0..1099511627776") != NULL, "%s", rpc_last_error());
    edit_manifest(e.ck, "shard-1-w1.bin -", "shard-1-w1.bin ");
    path_of(p, sizeof p, e.ck, "shard-1-w1.bin");
    ck_assert_int_eq(shard_call("w1", "check", p, -1, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: shard shard-1-w1.bin: size -1 is out of range 0..1099511627776");
    path_of(p, sizeof p, e.ck, "shard--9223372036854775808-w1.bin");
    ck_assert_int_eq(shard_call("w1", "save", p, 0, 0, e.m.a, "a", err, sizeof err), -1);
    ck_assert_str_eq(err, "rpc: w1: dist_ckpt._shard: 'shard--9223372036854775808-w1.bin' is not a shard name of w1 (shard-<generation>-w1.bin)");
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 1);

    /* the last generation: it loads, and a save past it is refused */
    const char *last = "999999999999999999";
    for (int w = 1; w <= 2; w++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "shard-1-w%d.bin", w);
        snprintf(to, sizeof to, "shard-%s-w%d.bin", last, w);
        path_of(p, sizeof p, e.ck, from);
        path_of(q, sizeof q, e.ck, to);
        ck_assert_int_eq(rename(p, q), 0);
        edit_manifest(e.ck, from, to);
    }
    edit_manifest(e.ck, "generation 1", "generation 999999999999999999");
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(dist_ckpt_save(e.ck, 2, e.m.mods, e.m.opt, 2), -1);
    snprintf(want, sizeof want, "dist_ckpt_save: %s/MANIFEST: generation 999999999999999999 is the last one; save into a new directory", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_int_eq(count_entries(e.ck), 3);
    ck_assert_msg(dist_ckpt_load(e.ck, 2, e.m.mods, e.m.opt, &step) == 0, "%s", rpc_last_error());
    assert_answers("w1");
    env_stop(&e);
}
END_TEST

/* N10: a worker whose name the manifest cannot carry: refused at save,
 * before a shard is written. */
static int serve_as_spaced(int rank, const char *master, void *arg)
{
    (void)arg;
    struct rpc_opts o = dh_opts(rank, DH.world, master);
    if (rank == 2) o.name = "w two";
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", o.name, rpc_last_error());
        return 10;
    }
    rpc_shutdown(true);
    return 0;
}

START_TEST(unnameable_worker_refused)
{
    char root[] = "/tmp/trib-ckh-root-XXXXXX", ck[128], want[256];
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(ck, sizeof ck, "%s/ck", root);
    ckpt_root = root;
    dh_extra_register = register_ckpt;
    dh_start(3, serve_as_spaced, NULL);
    struct model m;
    model_new(&m, "w1", "w two", false);
    ck_assert_int_eq(dist_ckpt_save(ck, 2, m.mods, NULL, 1), -1);
    snprintf(want, sizeof want, "dist_ckpt_save: worker 'w two' cannot be named in a checkpoint (1-63 printable characters without spaces or '/')");
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_int_eq(count_entries(ck), 0);
    /* without the module on "w two", the save goes through */
    ck_assert_msg(dist_ckpt_save(ck, 1, m.mods, NULL, 1) == 0, "%s", rpc_last_error());
    ck_assert_msg(dist_ckpt_load(ck, 1, m.mods, NULL, NULL) == 0, "%s", rpc_last_error());
    model_free(&m);
    dh_stop();
    ck_assert_int_eq(kit_rm_rf(root), 0);
}
END_TEST

/* The rule itself: an owner with no root refuses another process's
 * directory; the caller's own process serves its own shards there. */
START_TEST(owner_without_root_refuses)
{
    struct env e;
    snprintf(e.root, sizeof e.root, "/tmp/trib-ckh-root-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(e.root));
    snprintf(e.ck, sizeof e.ck, "%s/ck", e.root);
    ckpt_root = NULL;
    dh_extra_register = register_ckpt;
    dh_start(3, NULL, NULL);
    struct model m;
    model_new(&m, "w1", "w0", false);
    char want[512];
    ck_assert_int_eq(dist_ckpt_save(e.ck, 2, m.mods, NULL, 1), -1);
    snprintf(want, sizeof want, "dist_ckpt_save: w1: %s is not a checkpoint directory of w1 (see dist_ckpt_add_root)", e.ck);
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert(exists(e.ck, "shard-1-w0.bin") && !exists(e.ck, "shard-1-w1.bin") && !exists(e.ck, "MANIFEST"));
    /* w0's own module alone: saved and loaded with no root anywhere */
    ck_assert_msg(dist_ckpt_save(e.ck, 1, m.mods + 1, NULL, 5) == 0, "%s", rpc_last_error());
    int64_t step = 0;
    ck_assert_msg(dist_ckpt_load(e.ck, 1, m.mods + 1, NULL, &step) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(step, 5);
    /* and once the call is over, w0's owner side refuses its directory too */
    char p[512], err[1024];
    path_of(p, sizeof p, e.ck, "shard-2-w0.bin");
    ck_assert_int_eq(shard_call("w0", "check", p, 0, 0, NULL, NULL, err, sizeof err), -1);
    snprintf(want, sizeof want, "rpc: w0: dist_ckpt._shard: %s is not a checkpoint directory of w0 (see dist_ckpt_add_root)", e.ck);
    ck_assert_str_eq(err, want);
    model_free(&m);
    dh_stop();
    ck_assert_int_eq(kit_rm_rf(e.root), 0);
}
END_TEST

START_TEST(add_root_arguments)
{
    ck_assert_int_eq(dist_ckpt_add_root(NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_add_root: dir is NULL or empty");
    ck_assert_int_eq(dist_ckpt_add_root(""), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_add_root: dir is NULL or empty");
    for (int i = 0; i < 16; i++) ck_assert_int_eq(dist_ckpt_add_root("relative/dir"), 0);
    ck_assert_int_eq(dist_ckpt_add_root("/one/more"), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_ckpt_add_root: 16 roots already (the most)");
}
END_TEST

KIT_MAIN("dist_ckpt_hostile",
         { "hostile", 120, .tests = { save_outside_refused, checkpoint_shard_not_replaced, load_outside_refused,
           dev_zero_refused, fifo_refused, numbers_range_checked, unnameable_worker_refused,
           owner_without_root_refuses, add_root_arguments } })
