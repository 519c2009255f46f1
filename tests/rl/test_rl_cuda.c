/* The RL system with the policy on the GPU (--device cuda): a run trains,
 * checkpoints, and resumes from its checkpoint (the parameters and the
 * optimizer state written back to the device), then goes on training.
 * Skips (77) without a CUDA device. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_harness.h"
#include "tensor/tensor.h"
#include "kit.h"

START_TEST(test_gpu_policy_trains_and_resumes)
{
    char d[] = "/tmp/test_rl_cuda_XXXXXX";
    ck_assert(mkdtemp(d));
    const char *a1[] = { "--device", "cuda", "--observers", "2", "--envs-per-observer", "8", "--seed", "5",
                         "--max-updates", "16", "--logdir", d, "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, a1, NULL);
    ck_assert_msg(rl_wait(&p, RUN_TIMEOUT_S) == 1, "exit %d:\n%s", p.status, tail(p.err));
    rl_free(&p);
    const char *a2[] = { "--device", "cuda", "--observers", "2", "--envs-per-observer", "8", "--seed", "5",
                         "--max-updates", "24", "--resume", d, "--quiet", NULL };
    rl_start(&p, TRIB_TRAIN_BIN, a2, NULL);
    ck_assert_msg(rl_wait(&p, RUN_TIMEOUT_S) == 1, "resume exit %d:\n%s", p.status, tail(p.err));
    ck_assert_msg(strstr(p.out, "tributary: resumed from ") && strstr(p.out, "ckpt-000000000016.trib: "), "%s", p.out);
    cJSON *j = summary(&p);
    ck_assert_msg(jnum(j, "updates") == 24, "the resumed run did not go on to 24 updates:\n%s", tail(p.out));
    cJSON_Delete(j);
    rl_free(&p);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    if (!tensor_cuda_available()) {
        printf("test_rl_cuda: no CUDA device, skipping\n");
        return 77;
    }
    return KIT_RUN("rl_cuda",
             { "gpu", 600, .teardown = rl_kill_all, .tests = { test_gpu_policy_trains_and_resumes } });
}
