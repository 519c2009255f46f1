/* libFuzzer target: the .safetensors reader (runfiles/safetensors.c) and the
 * policy file built on it (runfiles/policy_file.c: the architecture in the
 * metadata, checked against the file before it is built). The input is
 * the file. */
#define _GNU_SOURCE
#include "fuzz_file.h"
#include "runfiles/policy_file.h"
#include "runfiles/safetensors.h"
#include "tensor/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    struct safetensors *st = safetensors_load(path);
    if (!st) return 0;
    for (int i = 0; i < st->n; i++) tensor_nbytes(st->tensors[i]);
    safetensors_free(st);
    struct policy_arch a;
    char env[512];
    struct nn_module *actor = NULL, *critic = NULL;
    if (policy_file_load(path, &a, env, sizeof env, &actor, &critic) == 0) {
        nn_module_free(actor);
        nn_module_free(critic);
    }
    return 0;
}
