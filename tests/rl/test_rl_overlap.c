/* Sync mode's overlap (--overlap, docs/design.md §6 "Overlap"): observers
 * collect the next rollout, acted on by a frozen copy of the policy, while
 * the agent learns from this one. Real tributary-train runs on loopback:
 *   - an overlapped run is bit-reproducible (the policy file's bytes and the
 *     summary's figures twice the same), it learns from a behaviour policy
 *     one rollout behind (the lag recorded: epochs x minibatches versions),
 *     and it is not the run without overlap (whose summary has no lag);
 *   - a boundary that writes a checkpoint is drained (no rollout asked for
 *     ahead across it): the lag histogram says which rollouts were fresh,
 *     and a run resumed there is the uninterrupted run, bit for bit;
 *   - an observer that crashes while it collects ahead is dropped and the
 *     run goes on with the other;
 *   - trib-floor, emulating the overlap in one process, makes the same
 *     updates as the distributed run: every progress row the same (a
 *     discrete policy, 2 observers: docs/design.md §8), with
 *     --overlap-correction decoupled (the default: a lagged rollout learnt
 *     against the policy at its updates' start, the agent's acting copy,
 *     frozen anew at a drained boundary) and none;
 *   - the correction changes what is learnt: decoupled's policy is not
 *     none's; A2C (no ratio) ignores it. */
#define _GNU_SOURCE
#include "rl_harness.h"

#include <sys/stat.h>

#include "kit.h"

#define SMALL "--observers", "2", "--envs-per-observer", "4", "--steps-per-rollout", "32", "--epochs", "2", \
              "--minibatches", "2", "--hidden", "16,16", "--seed", "5", "--device", "cpu", "--quiet"

static char scratch_dir[64];        /* a test's directory under /tmp, removed by the teardown */

static const char *scratch(void)
{
    return kit_must_scratch(scratch_dir, sizeof scratch_dir, "trib_overlap_");
}

static void teardown(void)
{
    rl_kill_all();
    if (scratch_dir[0]) kit_rm_rf(scratch_dir);
    scratch_dir[0] = '\0';
}

/* Runs tributary-train with args and --logdir DIR/name; its summary (the
 * caller deletes it). The run must end by its budget (exit 1). */
static cJSON *train(const char *dir, const char *name, const char *const *args, const char *const *env)
{
    struct rl_proc p;
    rl_run_logdir(&p, TRIB_TRAIN_BIN, dir, name, args, env, 1);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    rl_free(&p);
    return j;
}

/* Whether runs a and b (under dir) wrote the same policy.safetensors, byte
 * for byte. */
static bool same_policy(const char *dir, const char *a, const char *b)
{
    char path[300];
    size_t na, nb;
    snprintf(path, sizeof path, "%s/%s/policy.safetensors", dir, a);
    char *pa = kit_must_read(path, &na);
    snprintf(path, sizeof path, "%s/%s/policy.safetensors", dir, b);
    char *pb = kit_must_read(path, &nb);
    bool same = na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

/* lag_hist of summary j: bins[i] for i < cap (0 past its end). */
static void lag_hist(const cJSON *j, long long *bins, int cap)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "lag_hist");
    ck_assert_msg(cJSON_IsArray(h), "summary: no lag_hist");
    for (int i = 0; i < cap; i++) {
        const cJSON *x = cJSON_GetArrayItem(h, i);
        bins[i] = x ? (long long)x->valuedouble : 0;
    }
}

/* 5 iterations of 2 x 2 updates: the first rollout is fresh (lag 0), each
 * later one was collected during the updates before it (lag 4 = one
 * rollout's updates); run twice, bit for bit; without --overlap another
 * policy, and no lag in the summary; with --overlap-correction none
 * another policy again (the lagged rollouts' loss calls carry no proximal
 * policy: an observer ignoring the one it is sent would write this one). */
START_TEST(test_overlap_reproducible)
{
    const char *dir = scratch();
    const char *on[] = { SMALL, "--max-updates", "20", "--overlap", "--overlap-correction", "decoupled", NULL };
    const char *none[] = { SMALL, "--max-updates", "20", "--overlap", "--overlap-correction", "none", NULL };
    const char *off[] = { SMALL, "--max-updates", "20", NULL };
    cJSON *a = train(dir, "a", on, NULL), *b = train(dir, "b", on, NULL), *c = train(dir, "off", off, NULL);
    cJSON *d = train(dir, "none", none, NULL);
    ck_assert_msg(same_policy(dir, "a", "b"), "two overlapped runs of one seed wrote different policies");
    ck_assert_msg(!same_policy(dir, "a", "off"), "the overlapped run's policy is the run without overlap's");
    ck_assert_msg(!same_policy(dir, "a", "none"),
                  "--overlap-correction decoupled wrote --overlap-correction none's policy");
    ck_assert_msg(!same_policy(dir, "none", "off"), "the overlapped run without correction is the run without overlap");
    ck_assert_int_eq((int)jnum(d, "lag_max"), 4);
    static const char *const same[] = { "env_steps", "episodes", "updates", "return_mean", "lag_mean", "lag_max", NULL };
    for (int i = 0; same[i]; i++)
        ck_assert_msg(jnum(a, same[i]) == jnum(b, same[i]), "%s: %.17g then %.17g", same[i], jnum(a, same[i]),
                      jnum(b, same[i]));
    ck_assert_int_eq((int)jnum(a, "updates"), 20);
    ck_assert_int_eq((int)jnum(a, "lag_max"), 4);   /* one rollout: epochs x minibatches versions */
    long long bins[6];
    lag_hist(a, bins, 6);
    ck_assert_msg(bins[0] == 4 && bins[1] == 0 && bins[2] == 0 && bins[3] == 0 && bins[4] == 16 && bins[5] == 0,
                  "lag_hist %lld,%lld,%lld,%lld,%lld,%lld: want the first rollout's 4 updates at 0, the others' 16 at 4",
                  bins[0], bins[1], bins[2], bins[3], bins[4], bins[5]);
    ck_assert_msg(!cJSON_GetObjectItemCaseSensitive(c, "lag_max"), "a sync run without overlap reports a lag");
    ck_assert_int_eq((int)jnum(c, "updates"), 20);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
}
END_TEST

/* With dropout the acting copy's proximal forwards (one per update, on the
 * agent's main thread) draw their masks from a stream of their own, so the
 * act calls of the rollout collected meanwhile draw theirs as they would
 * without them, in whatever order the two interleave: run twice, bit for
 * bit (the proximal forwards drawing from the act calls' stream made every
 * run another policy). */
START_TEST(test_overlap_dropout_reproducible)
{
    const char *dir = scratch();
    const char *args[] = { SMALL, "--max-updates", "24", "--overlap", "--dropout", "0.25", NULL };
    cJSON *a = train(dir, "a", args, NULL), *b = train(dir, "b", args, NULL);
    ck_assert_msg(same_policy(dir, "a", "b"), "two overlapped runs with dropout wrote different policies");
    ck_assert_msg(jnum(a, "return_mean") == jnum(b, "return_mean"), "return_mean %.17g then %.17g",
                  jnum(a, "return_mean"), jnum(b, "return_mean"));
    cJSON_Delete(a);
    cJSON_Delete(b);
}
END_TEST

/* A2C has no ratio to centre a clip on (its table's prox is false): an
 * overlapped A2C run learns the same with either correction, bit for bit,
 * and is still overlapped (its lag recorded). */
START_TEST(test_overlap_a2c_ignores_correction)
{
    const char *dir = scratch();
    const char *dec[] = { "--preset", "a2c", SMALL, "--max-updates", "12", "--overlap", "--overlap-correction", "decoupled",
                          NULL };
    const char *none[] = { "--preset", "a2c", SMALL, "--max-updates", "12", "--overlap", "--overlap-correction", "none",
                           NULL };
    cJSON *a = train(dir, "dec", dec, NULL), *b = train(dir, "none", none, NULL);
    ck_assert_msg(same_policy(dir, "dec", "none"), "A2C's policy depends on --overlap-correction");
    ck_assert_int_eq((int)jnum(a, "updates"), 12);
    ck_assert_msg(jnum(a, "lag_max") > 0, "an overlapped A2C run with no lag");
    cJSON_Delete(a);
    cJSON_Delete(b);
}
END_TEST

/* --checkpoint-every 8 (two iterations): the boundary after every second
 * iteration writes a checkpoint, so the rollout after it is not asked for
 * ahead: iterations 1 and 3 learn fresh rollouts (lag 0), 2 and 4 ones
 * collected ahead (lag 4); checkpoints are written (that they hold the
 * observers at a still point, test_overlap_resume_same shows). */
START_TEST(test_overlap_drains_at_checkpoints)
{
    const char *dir = scratch();
    const char *args[] = { SMALL, "--max-updates", "16", "--overlap", "--checkpoint-every", "8", NULL };
    cJSON *j = train(dir, "ck", args, NULL);
    long long bins[6];
    lag_hist(j, bins, 6);
    ck_assert_msg(bins[0] == 8 && bins[4] == 8, "lag_hist %lld,%lld,%lld,%lld,%lld: want 8 updates at 0 and 8 at 4",
                  bins[0], bins[1], bins[2], bins[3], bins[4]);
    char path[300];
    struct stat st;
    snprintf(path, sizeof path, "%s/ck/checkpoints", dir);
    ck_assert_msg(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "no checkpoints directory in %s", path);
    cJSON_Delete(j);
}
END_TEST

/* A run stopped at a drained boundary (--max-updates 8, a checkpoint every
 * 8) and resumed to 24 updates writes the policy the uninterrupted run of
 * 24 writes, bit for bit: the checkpoint holds every observer at a still
 * point, and the uninterrupted run drained at the same boundary. */
START_TEST(test_overlap_resume_same)
{
    const char *dir = scratch();
    const char *whole[] = { SMALL, "--overlap", "--checkpoint-every", "8", "--max-updates", "24", NULL };
    const char *first[] = { SMALL, "--overlap", "--checkpoint-every", "8", "--max-updates", "8", NULL };
    cJSON *a = train(dir, "whole", whole, NULL), *b = train(dir, "parts", first, NULL);
    ck_assert_int_eq((int)jnum(b, "updates"), 8);
    char logdir[256];
    snprintf(logdir, sizeof logdir, "%s/parts", dir);
    const char *resume[] = { "--resume", logdir, "--max-updates", "24", "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, resume, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "resume: exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    cJSON *c = summary(&p);
    ck_assert_int_eq((int)jnum(c, "updates"), 24);
    ck_assert_msg(same_policy(dir, "whole", "parts"), "the resumed run's policy is not the uninterrupted run's");
    ck_assert_msg(jnum(a, "return_mean") == jnum(c, "return_mean"), "return_mean %.17g, resumed %.17g",
                  jnum(a, "return_mean"), jnum(c, "return_mean"));
    rl_free(&p);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
}
END_TEST

/* One observer crashes (SIGSEGV in its env) at its 40th step of each env:
 * in its second rollout, the one collected ahead while the agent learns the
 * first. It is dropped; the other goes on to the budget. */
START_TEST(test_overlap_observer_lost)
{
    const char *dir = scratch();
    char once[200];
    snprintf(once, sizeof once, "TRIB_FAULT_ONCE=%s/once", dir);
    const char *env[] = { "TRIB_FAULT=segv", "TRIB_FAULT_AT=40", once, NULL };
    const char *args[] = { "--env", FAULTY_SO, SMALL, "--max-updates", "16", "--overlap", "--heartbeat-timeout", "3000",
                           NULL };
    struct rl_proc p;
    rl_run_logdir(&p, TRIB_TRAIN_BIN, dir, "lost", args, env, 1);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 1);
    /* the iteration it was lost in may end early: the budget is met at a boundary */
    ck_assert_msg(jnum(j, "updates") >= 16 && jnum(j, "updates") < 20, "updates %g", jnum(j, "updates"));
    ck_assert_msg(strstr(p.err, "agent: lost observer"), "no observer lost on stderr:\n%s", p.err);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST


/* CartPole-v1, 2 observers, overlapped: the run learns from the rollout
 * collected with the policy before the previous rollout's updates, exactly
 * as the floor does it in one process: with --overlap-correction none (the
 * behaviour policy the clip's centre) and decoupled (the policy at the
 * updates' start), this one with a checkpoint every 3 iterations, whose
 * boundary is drained: the lagged rollout before it learns against an
 * acting copy frozen for it (no rollout asked for ahead froze one), the
 * one after it is fresh (no proximal policy). */
START_TEST(test_overlap_floor_same_updates)
{
    const char *none[] = { SMALL, "--max-updates", "40", "--overlap", "--overlap-correction", "none", "--log-every",
                           "0.0000001", NULL };
    rl_check_floor_same(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, none, true);
    const char *decoupled[] = { SMALL, "--max-updates", "36", "--overlap", "--overlap-correction", "decoupled",
                                "--checkpoint-every", "12", "--log-every", "0.0000001", NULL };
    rl_check_floor_same_in(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, decoupled, scratch(), true);
}
END_TEST

/* The floor an exact reference beyond the first update (test_rl_equiv's):
 * a Gaussian policy (one log_std for every observer's rows) and 3
 * observers whose envs hit their time limit (each truncation's extra act
 * call merged with the others' calls of the moment), without and with
 * overlap. */
START_TEST(test_floor_same_updates_gaussian)
{
    const char *off[] = { "--preset", "pendulum", "--observers", "3", "--envs-per-observer", "4", "--steps-per-rollout",
                          "64", "--epochs", "4", "--max-steps", "9000", "--seed", "3", "--device", "cpu", "--log-every", "0.0000001",
                          "--no-overlap", NULL };
    rl_check_floor_same(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, off, false);
    const char *on[] = { "--preset", "pendulum", "--observers", "3", "--envs-per-observer", "4", "--steps-per-rollout",
                         "64", "--epochs", "4", "--max-steps", "9000", "--seed", "3", "--device", "cpu", "--log-every", "0.0000001",
                         "--overlap", "--norm-obs", "--norm-reward", NULL };
    rl_check_floor_same(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, on, true);
}
END_TEST

KIT_MAIN("rl_overlap", { "overlap", 300, .teardown = teardown, .tests = { test_overlap_reproducible,
          test_overlap_a2c_ignores_correction, test_overlap_dropout_reproducible,
          test_overlap_drains_at_checkpoints, test_overlap_observer_lost, test_overlap_resume_same, test_overlap_floor_same_updates,
          test_floor_same_updates_gaussian } })
