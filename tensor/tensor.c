/* Tensor core: construction, reference counting, copy-on-write storage and
 * the thread-local error message. Device memory goes through backend.h. */
#include "tensor/tensor.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/error.h"
#include "common/freelist.h"
#include "tensor/backend.h"
#include "tensor/ops_internal.h"

/* ---- errors ------------------------------------------------------------ */

TRIB_ERROR_MODULE(tensor)

void *tensor_error(const char *fmt, ...)
{
    if (!fmt) {
        tensor_set_error("tensor_error: fmt is NULL");
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    trib_error_vset(&tensor_error_text, fmt, ap);
    va_end(ap);
    return NULL;
}

void tensor_clear_error(void) { trib_error_clear(&tensor_error_text); }

/* ---- dtypes and shapes ------------------------------------------------- */

char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t used = 0;
    if (!buf) return tensor_error("shape_str: buf is NULL");
    if (!shape && ndim > 0) return tensor_error("shape_str: shape is NULL");
    if (cap == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* ---- storage ------------------------------------------------------------ */

const struct tensor_backend *usable_backend(enum device dev, const char *who)
{
    const struct tensor_backend *be = tensor_backend_for(dev);
    if (!be) return tensor_error("%s: the %s backend is not built", who, device_name(dev));
    if (!be->available()) return tensor_error("%s: no %s device is available", who, device_name(dev));
    return be;
}

/* Tensor and storage structs come from free lists: a pipeline allocates
 * them on one thread and frees them on another (a reply's tensors: the I/O
 * thread builds them, the caller frees them), and glibc's free() of another
 * thread's block takes that thread's arena lock. Off under the sanitizers:
 * AddressSanitizer is to see every block's life, and ThreadSanitizer cannot
 * see the hand-off when libzmq's thread frees a sent tensor. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POOL_ON 0
#else
#define POOL_ON 1
#endif
#define POOL_MAX 4096
static struct trib_freelist tensor_fl = TRIB_FREELIST_INIT(sizeof(struct tensor), 0, POOL_MAX);
static struct trib_freelist storage_fl = TRIB_FREELIST_INIT(sizeof(struct tensor_storage), 0, POOL_MAX);

static void *pool_get(struct trib_freelist *fl)
{
    if (POOL_ON) return trib_fl_get(fl);
    return trib_xcalloc(1, fl->size);
}

static void pool_put(struct trib_freelist *fl, void *p)
{
    if (POOL_ON) trib_fl_put(fl, p);
    else free(p);
}

/* A storage owning `data` (nbytes on dev). */
static struct tensor_storage *storage_wrap(enum device dev, size_t nbytes, void *data)
{
    struct tensor_storage *s = pool_get(&storage_fl);
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->device = dev;
    s->nbytes = nbytes;
    s->data = data;
    return s;
}

static struct tensor_storage *storage_new(const struct tensor_backend *be, enum device dev, size_t nbytes)
{
    void *data = be->alloc(nbytes);
    CHECK_ALLOC(data);
    return storage_wrap(dev, nbytes, data);
}

static void storage_release(struct tensor_storage *s)
{
    if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
    tensor_backend_for(s->device)->free(s->data);
    pool_put(&storage_fl, s);
}

/* Striped locks guard each tensor's storage pointer (snapshot vs COW swap). */
#define N_STRIPES 64
static pthread_mutex_t stripes[N_STRIPES] = {[0 ... N_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t *lock_for(const struct tensor *t)
{
    uintptr_t h = (uintptr_t)t;
    return &stripes[(h >> 6 ^ h >> 12) % N_STRIPES];
}

/* ---- construction ------------------------------------------------------- */

static atomic_uint_fast64_t next_id = 1;

static struct tensor *tensor_alloc_struct(enum dtype dt, enum device dev, int ndim, const int64_t *shape)
{
    struct tensor *t = pool_get(&tensor_fl);
    atomic_init(&t->refcount, 1);
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    t->id = atomic_fetch_add(&next_id, 1);
    return t;
}

/* tensor_new, with the zero fill optional (ops whose kernels write every
 * element skip it: see tensor_new_uninit in ops_internal.h) and, with
 * may_fail, an error instead of an abort when the memory cannot be had. */
static struct tensor *tensor_make(enum dtype dt, enum device dev, int ndim, const int64_t *shape, bool zero,
                                  bool may_fail)
{
    if ((unsigned)dt >= DTYPE_COUNT) return tensor_error("tensor_new: invalid dtype %d", (int)dt);
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        return tensor_error("tensor_new: ndim %d is outside 0..%d", ndim, TENSOR_MAX_DIMS);
    if (ndim > 0 && !shape) return tensor_error("tensor_new: shape is NULL");
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return tensor_error("tensor_new: negative dim %lld at %d", (long long)shape[i], i);
        if (shape[i] && numel > INT64_MAX / 16 / shape[i])
            return tensor_error("tensor_new: shape is too large");
        numel *= shape[i];
    }
    const struct tensor_backend *be = usable_backend(dev, "tensor_new");
    if (!be) return NULL;
    size_t nbytes = (size_t)numel * dtype_size(dt);
    void *data = be->alloc(nbytes);
    if (!data && may_fail) return tensor_error("tensor_new: cannot allocate %zu bytes", nbytes);
    CHECK_ALLOC(data);
    struct tensor *t = tensor_alloc_struct(dt, dev, ndim, shape);
    t->storage = storage_wrap(dev, nbytes, data);
    if (zero) be->zero(t->storage->data, t->storage->nbytes);
    return t;
}

struct tensor *tensor_new(enum dtype dt, enum device dev, int ndim, const int64_t *shape)
{
    return tensor_make(dt, dev, ndim, shape, true, false);
}

struct tensor *tensor_new_uninit(enum dtype dt, enum device dev, int ndim, const int64_t *shape)
{
    return tensor_make(dt, dev, ndim, shape, false, false);
}

struct tensor *tensor_try_new(enum dtype dt, enum device dev, int ndim, const int64_t *shape, bool zero)
{
    return tensor_make(dt, dev, ndim, shape, zero, true);
}

/* tensor_from_data for `who`: a NULL shape (ndim > 0) or NULL data (any
 * element to copy) is an error naming who. */
static struct tensor *from_data(const char *who, enum dtype dt, int ndim, const int64_t *shape, const void *data)
{
    if (ndim > 0 && !shape) return tensor_error("%s: shape is NULL", who);
    struct tensor *t = tensor_new_uninit(dt, DEVICE_CPU, ndim, shape);
    if (!t || !t->numel) return t;
    if (!data) {
        tensor_free(t);
        return tensor_error("%s: data is NULL", who);
    }
    memcpy(t->storage->data, data, tensor_nbytes(t));
    return t;
}

struct tensor *tensor_from_data(enum dtype dt, int ndim, const int64_t *shape, const void *data)
{
    return from_data("tensor_from_data", dt, ndim, shape, data);
}

struct tensor *tensor_from_f32(int ndim, const int64_t *shape, const float *data)
{
    return from_data("tensor_from_f32", DTYPE_F32, ndim, shape, data);
}

struct tensor *tensor_scalar_f32(float v) { return tensor_from_f32(0, NULL, &v); }

struct tensor *tensor_retain(struct tensor *t)
{
    if (t) atomic_fetch_add(&t->refcount, 1);
    return t;
}

void tensor_free(struct tensor *t)
{
    if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
    if (t->grad_fn) t->grad_fn_drop(t->grad_fn);
    tensor_free(t->grad);
    storage_release(t->storage);
    pool_put(&tensor_fl, t);
}

struct tensor *tensor_snapshot(struct tensor *t)
{
    if (!t) return tensor_error("tensor_snapshot: input is NULL");
    struct tensor *s = tensor_alloc_struct(t->dtype, t->device, t->ndim, t->shape);
    pthread_mutex_t *mu = lock_for(t);
    pthread_mutex_lock(mu);
    s->storage = t->storage;
    atomic_fetch_add(&s->storage->refcount, 1);
    s->saved_version = atomic_load(&s->storage->version);
    pthread_mutex_unlock(mu);
    return s;
}

void *tensor_mutable_data(struct tensor *t)
{
    if (!t) return tensor_error("tensor_mutable_data: input is NULL");
    pthread_mutex_t *mu = lock_for(t);
    pthread_mutex_lock(mu);
    struct tensor_storage *old = t->storage;
    if (atomic_load(&old->refcount) > 1) {
        const struct tensor_backend *be = tensor_backend_for(old->device);
        struct tensor_storage *s = storage_new(be, old->device, old->nbytes);
        be->copy(s->data, old->data, old->nbytes);
        atomic_store(&s->version, atomic_load(&old->version));
        t->storage = s;
        storage_release(old);
    }
    atomic_fetch_add(&t->storage->version, 1);
    void *data = t->storage->data;
    pthread_mutex_unlock(mu);
    return data;
}

void *tensor_write_begin(struct tensor *t, struct tensor_write *w)
{
    if (!w) return tensor_error("tensor_write_begin: w is NULL");
    w->storage = NULL;   /* a tensor_write_end after a failed begin is then a no-op */
    if (!t) return tensor_error("tensor_write_begin: input is NULL");
    struct tensor *cur = tensor_snapshot(t);   /* holds the current storage */
    const struct tensor_backend *be = tensor_backend_for(cur->device);
    w->storage = storage_new(be, cur->device, cur->storage->nbytes);
    be->copy(w->storage->data, cur->storage->data, cur->storage->nbytes);
    tensor_free(cur);
    return w->storage->data;
}

void tensor_write_end(struct tensor *t, struct tensor_write *w)
{
    if (!w) {
        tensor_error("tensor_write_end: w is NULL");
        return;
    }
    if (!w->storage) {
        tensor_error("tensor_write_end: no write begun on w");
        return;
    }
    if (!t) {   /* nowhere to publish: the private copy is dropped */
        storage_release(w->storage);
        w->storage = NULL;
        tensor_error("tensor_write_end: input is NULL");
        return;
    }
    pthread_mutex_t *mu = lock_for(t);
    pthread_mutex_lock(mu);
    struct tensor_storage *old = t->storage;
    atomic_store(&w->storage->version, atomic_load(&old->version) + 1);
    t->storage = w->storage;
    pthread_mutex_unlock(mu);
    storage_release(old);
    w->storage = NULL;
}

int tensor_write_from_host(struct tensor *t, const void *src, size_t nbytes)
{
    if (!t) {
        tensor_error("tensor_write_from_host: input is NULL");
        return -1;
    }
    if (!src && nbytes) {
        tensor_error("tensor_write_from_host: src is NULL");
        return -1;
    }
    if (nbytes != tensor_nbytes(t)) {
        tensor_error("tensor_write_from_host: %zu bytes for a tensor of %zu", nbytes, tensor_nbytes(t));
        return -1;
    }
    struct tensor_write w;
    void *dst = tensor_write_begin(t, &w);
    if (nbytes) tensor_backend_for(t->device)->copy_from_host(dst, src, nbytes);
    tensor_write_end(t, &w);
    return 0;
}

void tensor_copy_to_host(const struct tensor *t, void *dst)
{
    if (!t) {
        tensor_error("tensor_copy_to_host: input is NULL");
        return;
    }
    if (!dst && tensor_nbytes(t)) {
        tensor_error("tensor_copy_to_host: dst is NULL");
        return;
    }
    if (!tensor_nbytes(t)) return;
    tensor_backend_for(t->device)->copy_to_host(dst, t->storage->data, tensor_nbytes(t));
}

struct tensor *tensor_clone_to(const struct tensor *t, enum device dev)
{
    if (!t) return tensor_error("tensor_clone_to: input is NULL");
    struct tensor *c = tensor_new(t->dtype, dev, t->ndim, t->shape);
    if (!c || !tensor_nbytes(t)) return c;
    const void *src = t->storage->data;
    if (t->device == dev)
        tensor_backend_for(dev)->copy(c->storage->data, src, tensor_nbytes(t));
    else if (t->device == DEVICE_CPU)
        tensor_backend_for(dev)->copy_from_host(c->storage->data, src, tensor_nbytes(t));
    else if (dev == DEVICE_CPU)
        tensor_backend_for(t->device)->copy_to_host(c->storage->data, src, tensor_nbytes(t));
    else
        CHECK(!"device-to-device copy between two accelerator kinds");
    return c;
}

bool tensor_same_shape(const struct tensor *a, const struct tensor *b)
{
    if (!a || !b) {
        tensor_error("tensor_same_shape: input is NULL");
        return false;
    }
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

void tensor_set_requires_grad(struct tensor *t, bool on)
{
    if (!t) {
        tensor_error("tensor_set_requires_grad: input is NULL");
        return;
    }
    t->requires_grad = on;
}

void tensor_zero_grad(struct tensor *t)
{
    if (!t) {
        tensor_error("tensor_zero_grad: input is NULL");
        return;
    }
    tensor_free(t->grad);
    t->grad = NULL;
}

bool tensor_cuda_available(void)
{
    const struct tensor_backend *be = tensor_backend_for(DEVICE_CUDA);
    return be && be->available();
}

const struct tensor_backend *tensor_backend_for(enum device dev)
{
    if (dev == DEVICE_CPU) return tensor_cpu_backend();
#ifdef TRIB_WITH_CUDA
    if (dev == DEVICE_CUDA) return tensor_cuda_backend();
#endif
    return NULL;
}
