/* The policy's forward (arch.h). */
#include "rl/arch.h"

#include <string.h>

#include "common/check.h"
#include "rl/messages.h"
#include "tensor/ops.h"

int rl_arch_forward(const struct policy_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *o)
{
    memset(o, 0, sizeof *o);
    struct tensor *x = dev == DEVICE_CPU ? tensor_retain(obs) : tensor_to(obs, dev);
    if (!x) return -1;
    struct tensor *out[NN_MAX_IO + 1] = { 0 };
    int n_out = 0;
    int rc = nn_forward(actor, 1, &x, &n_out, out);
    CHECK(rc != 0 || n_out == (a->gaussian ? 2 : 1));
    if (rc == 0 && critic) {
        struct tensor *v = nn_forward1(critic, x);
        int64_t len = x->shape[0];
        out[n_out] = v ? tensor_reshape(v, 1, &len) : NULL;
        tensor_free(v);
        if (!out[n_out++]) rc = -1;
    }
    tensor_free(x);
    struct tensor *cpu[NN_MAX_IO + 1] = { 0 };
    for (int i = 0; i < n_out; i++) {
        if (rc == 0) {
            cpu[i] = dev == DEVICE_CPU ? tensor_retain(out[i]) : tensor_to(out[i], DEVICE_CPU);
            if (!cpu[i]) rc = -1;
        }
        tensor_free(out[i]);
    }
    if (rc != 0) {
        for (int i = 0; i < n_out; i++) tensor_free(cpu[i]);
        return -1;
    }
    int k = 0;
    o->a = cpu[k++];
    o->log_std = a->gaussian ? cpu[k++] : NULL;
    o->value = a->value_head ? cpu[k++] : NULL;
    return 0;
}
