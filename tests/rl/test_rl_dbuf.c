/* Double-buffered envs in an observer (--double-buffer, docs/design.md §6
 * "Double buffering"): each observer's envs in two halves, one stepping
 * while the other's act call is in flight. Real tributary-train runs on
 * loopback:
 *   - a sync run with normalisation and time limits (a truncated env's
 *     bootstrap call per half) is bit-reproducible: the policy file's
 *     bytes and the summary's figures twice the same; every env stepped
 *     every step (env_steps exact), two act calls per observer and step
 *     (plus one per half with a truncation), each merged with the other
 *     observer's call of the same half (forwards = calls / observers);
 *   - with --overlap too, CartPole-v1 learns (return over 100);
 *   - async mode runs it to its budget;
 *   - trib-floor makes the same updates (its emulation of the halves);
 *   - an odd --envs-per-observer is refused, naming it, and so is an
 *     episodes algorithm (REINFORCE: one env). */
#define _GNU_SOURCE
#include "rl_harness.h"

#include "kit.h"

static char scratch_dir[64];        /* a test's directory under /tmp, removed by the teardown */

static const char *scratch(void)
{
    return kit_must_scratch(scratch_dir, sizeof scratch_dir, "trib_dbuf_");
}

static void teardown(void)
{
    rl_kill_all();
    if (scratch_dir[0]) kit_rm_rf(scratch_dir);
    scratch_dir[0] = '\0';
}

/* Runs tributary-train with args and --logdir DIR/name; its summary (the
 * caller deletes it). The run must exit `want`. */
static cJSON *train(const char *dir, const char *name, const char *const *args, int want)
{
    struct rl_proc p;
    rl_run_logdir(&p, TRIB_TRAIN_BIN, dir, name, args, NULL, want);
    cJSON *j = summary(&p);
    rl_free(&p);
    return j;
}

static char *policy_bytes(const char *dir, const char *name, size_t *n)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s/policy.safetensors", dir, name);
    return kit_must_read(path, n);
}

/* Pendulum-v1 (time limit 200), 2 observers x 4 envs x 64 steps, 4096
 * steps: 8 rollouts of 65 calls per half and observer, and each env
 * truncated at its steps 200 and 400 (both envs of a half at once: one
 * bootstrap call per half, 2 x 2 x 2 in all). */
START_TEST(test_dbuf_reproducible)
{
    const char *dir = scratch();
    const char *args[] = { "--env", "Pendulum-v1", "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout",
                           "64", "--epochs", "2", "--minibatches", "2", "--hidden", "16,16", "--seed", "5", "--device",
                           "cpu", "--quiet", "--max-steps", "4096", "--norm-obs", "--norm-reward", "--double-buffer",
                           NULL };
    cJSON *a = train(dir, "a", args, 0), *b = train(dir, "b", args, 0);
    size_t na, nb;
    char *pa = policy_bytes(dir, "a", &na), *pb = policy_bytes(dir, "b", &nb);
    ck_assert_msg(na == nb && memcmp(pa, pb, na) == 0, "two double-buffered runs of one seed wrote different policies");
    static const char *const same[] = { "env_steps", "episodes", "updates", "return_mean", "act_calls", "act_forwards",
                                        NULL };
    for (int i = 0; same[i]; i++)
        ck_assert_msg(jnum(a, same[i]) == jnum(b, same[i]), "%s: %.17g then %.17g", same[i], jnum(a, same[i]),
                      jnum(b, same[i]));
    ck_assert_int_eq((long long)jnum(a, "env_steps"), 4096);
    ck_assert_int_eq((long long)jnum(a, "episodes"), 16);
    ck_assert_int_eq((long long)jnum(a, "updates"), 8 * 2 * 2);
    ck_assert_int_eq((long long)jnum(a, "act_calls"), 8 * 2 * 2 * 65 + 8);
    ck_assert_int_eq((long long)jnum(a, "act_forwards"), (8 * 2 * 2 * 65 + 8) / 2);
    free(pa);
    free(pb);
    cJSON_Delete(a);
    cJSON_Delete(b);
}
END_TEST

/* CartPole-v1 (ppo-fast), 2 observers x 4 envs, overlapped and double
 * buffered: it learns (a random policy's return is about 22). */
START_TEST(test_dbuf_learns)
{
    const char *dir = scratch();
    const char *args[] = { "--observers", "2", "--envs-per-observer", "4", "--seed", "1", "--device", "cpu", "--quiet",
                           "--max-steps", "30000", "--overlap", "--double-buffer", NULL };
    cJSON *j = train(dir, "learn", args, 1);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_msg(jnum(j, "return_mean") > 100, "return_mean %g after 30000 steps", jnum(j, "return_mean"));
    ck_assert_msg(jnum(j, "act_calls") >= 2 * jnum(j, "env_steps") / 4, "act_calls %g for %g env steps of 4 envs",
                  jnum(j, "act_calls"), jnum(j, "env_steps"));
    cJSON_Delete(j);
}
END_TEST

/* Async mode: each observer's halves act on their own; the run ends by its
 * budget, every env stepped every step. */
START_TEST(test_dbuf_async)
{
    const char *dir = scratch();
    const char *args[] = { "--mode", "async", "--observers", "2", "--envs-per-observer", "4", "--steps-per-rollout",
                           "32", "--epochs", "2", "--minibatches", "2", "--hidden", "16,16", "--seed", "5", "--device",
                           "cpu", "--quiet", "--max-updates", "40", "--double-buffer", NULL };
    cJSON *j = train(dir, "async", args, 1);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    long long steps = (long long)jnum(j, "env_steps");
    ck_assert_msg(steps > 0 && steps % (4 * 32) == 0, "env_steps %lld: not whole rollouts of 4 envs x 32 steps", steps);
    ck_assert_msg(jnum(j, "act_calls") >= 2.0 * steps / 4, "act_calls %g: not two per observer step",
                  jnum(j, "act_calls"));
    cJSON_Delete(j);
}
END_TEST

/* trib-floor emulates the halves and the lockstep merge of each
 * observer's next call: the same updates, every progress row the same (a
 * discrete policy, 2 observers; a Gaussian one, 3 observers whose envs hit
 * their time limit, overlapped and normalised: docs/design.md §8). */
START_TEST(test_dbuf_floor_same_updates)
{
    const char *discrete[] = { "--observers", "2", "--envs-per-observer", "4", "--steps-per-rollout", "32", "--epochs",
                               "2", "--minibatches", "2", "--hidden", "16,16", "--seed", "5", "--device", "cpu",
                               "--max-updates", "40", "--log-every", "0.0000001", "--double-buffer", NULL };
    rl_check_floor_same(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, discrete, false);
    const char *gaussian[] = { "--preset", "pendulum", "--observers", "3", "--envs-per-observer", "4",
                               "--steps-per-rollout", "64", "--epochs", "4", "--max-steps", "9000", "--seed", "3",
                               "--device", "cpu", "--log-every", "0.0000001", "--overlap", "--norm-obs",
                               "--norm-reward", "--double-buffer", NULL };
    rl_check_floor_same(TRIB_TRAIN_BIN, TRIB_FLOOR_BIN, gaussian, true);
}
END_TEST

START_TEST(test_dbuf_odd_refused)
{
    const char *args[] = { "--envs-per-observer", "3", "--double-buffer", "--device", "cpu", "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 2, "exit %d, want 2 (a usage error)\nstderr:\n%s", rc, tail(p.err));
    ck_assert_msg(strstr(p.err, "--envs-per-observer must be even, not 3") && strstr(p.err, "--double-buffer"),
                  "the refusal does not name the flags:\n%s", tail(p.err));
    rl_free(&p);
    const char *episodes[] = { "--algo", "reinforce", "--envs-per-observer", "1", "--double-buffer", "--device", "cpu",
                               "--quiet", NULL };
    rl_start(&p, TRIB_TRAIN_BIN, episodes, NULL);
    rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 2, "reinforce: exit %d, want 2 (a usage error)\nstderr:\n%s", rc, tail(p.err));
    ck_assert_msg(strstr(p.err, "--double-buffer") && strstr(p.err, "--algo reinforce runs episodes of one env"),
                  "the refusal does not say why:\n%s", tail(p.err));
    rl_free(&p);
}
END_TEST

KIT_MAIN("rl_dbuf", { "dbuf", 300, .teardown = teardown, .tests = { test_dbuf_reproducible, test_dbuf_learns,
          test_dbuf_async, test_dbuf_floor_same_updates, test_dbuf_odd_refused } })
