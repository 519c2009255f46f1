/* Remote devices (placement.h): parsing "worker/device", checking it
 * against the world, and the owner-side functions behind rpc_tensor_to. */
#include "rpc/placement.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/membership.h"
#include "tensor/ops.h"

#define CUDA_ONLY_0 "only cuda:0 is supported (one CUDA device per worker process: choose its GPU with CUDA_VISIBLE_DEVICES)"

static int parse_device(const char *d, struct placement *out)
{
    if (strcmp(d, "cpu") == 0) {
        out->device = DEVICE_CPU;
        out->index = 0;
        return 0;
    }
    if (strcmp(d, "cuda") == 0) {
        out->device = DEVICE_CUDA;
        out->index = 0;
        return 0;
    }
    if (strncmp(d, "cuda:", 5) == 0 && d[5] >= '0' && d[5] <= '9') {
        char *end;
        errno = 0;
        long n = strtol(d + 5, &end, 10);
        if (*end == '\0' && errno == 0 && n <= 1024) {
            out->device = DEVICE_CUDA;
            out->index = (int)n;
            return 0;
        }
    }
    return -1;
}

int placement_parse(const char *s, struct placement *out)
{
    memset(out, 0, sizeof *out);
    const char *slash = strchr(s, '/');
    size_t wlen = slash ? (size_t)(slash - s) : strlen(s);
    if (wlen == 0) return rpc_set_error("placement '%s': no worker name", s);
    if (wlen >= sizeof out->worker) return rpc_set_error("placement '%s': worker name longer than %zu bytes", s, sizeof out->worker - 1);
    memcpy(out->worker, s, wlen);
    if (slash && parse_device(slash + 1, out) != 0)
        return rpc_set_error("placement '%s': unknown device '%s' (expected cpu or cuda:N)", s, slash + 1);
    return 0;
}

/* placement.has_cuda() -> bool: whether this worker can hold CUDA tensors. */
static int fn_has_cuda(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    *result = rpc_bool(tensor_cuda_available());
    return 0;
}

/* placement.tensor_to(t, device) -> a copy of t on device (the value an RRef holds). */
static int fn_tensor_to(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 2 || args->list.items[0].kind != RPC_TENSOR ||
        args->list.items[1].kind != RPC_INT)
        return rpc_request_fail(req, "expected (tensor, device)");
    enum device dev = args->list.items[1].i == DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU;
    struct tensor *t = tensor_clone_to(args->list.items[0].tensor, dev);
    if (!t) return rpc_request_fail(req, "%s", tensor_last_error());
    *result = rpc_tensor(t);
    tensor_free(t);
    return 0;
}

void rpc_placement_register(void)
{
    rpc_register("placement.has_cuda", fn_has_cuda, NULL);
    rpc_register("placement.tensor_to", fn_tensor_to, NULL);
}

int placement_resolve(const char *s, struct placement *out)
{
    if (placement_parse(s, out) != 0) return -1;
    struct rpc_worker_info info;
    if (rpc_get_worker_info(out->worker, &info) != 0)
        return rpc_set_error("placement '%s': unknown worker '%s'", s, out->worker);
    if (out->device != DEVICE_CUDA) return 0;
    if (out->index != 0) return rpc_set_error("placement '%s': " CUDA_ONLY_0, s);
    struct rpc_value has = rpc_nil();
    if (rpc_sync(out->worker, "placement.has_cuda", NULL, &has, 0) != 0)
        return rpc_set_error("placement '%s': %s", s, rpc_last_error());
    bool ok = has.kind == RPC_BOOL && has.b;
    rpc_value_clear(&has);
    if (!ok) return rpc_set_error("placement '%s': %s has no CUDA device", s, out->worker);
    return 0;
}

struct rref *rpc_tensor_to(const char *s, struct tensor *t)
{
    struct placement p;
    if (placement_resolve(s, &p) != 0) {
        rpc_set_error("rpc_tensor_to: %s", rpc_last_error());
        return NULL;
    }
    struct rpc_value a = rpc_list(2);
    struct tensor *plain = tensor_detach(t);
    a.list.items[0] = rpc_tensor(plain);
    a.list.items[1] = rpc_int(p.device);
    tensor_free(plain);
    struct rref *r = rpc_remote(p.worker, "placement.tensor_to", &a, 0);
    rpc_value_clear(&a);
    if (!r) {
        rpc_set_error("rpc_tensor_to: %s", rpc_last_error());
        return NULL;
    }
    return r;
}
