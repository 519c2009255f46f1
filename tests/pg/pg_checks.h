/* Collective checks shared by the process-group tests: each process of a
 * world runs them on its own (the parent under Check, the children
 * reporting on stderr), so they return 0 or -1 with a message instead of
 * asserting. Header-only. */
#ifndef TRIB_TESTS_PG_CHECKS_H
#define TRIB_TESTS_PG_CHECKS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/process_group.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

#define PC_FAIL(...) (snprintf(why, cap, __VA_ARGS__), -1)

/* The integer value rank r contributes at element i: small enough that a
 * sum over 3 ranks fits in u8, and exact in every dtype. */
static inline int64_t pc_value(int r, int64_t i) { return (int64_t)(r + 1) * (i % 7) + r; }

static inline void pc_store(struct tensor *t, int64_t i, double v)
{
    void *d = tensor_data(t);
    switch (t->dtype) {
    case DTYPE_F32: ((float *)d)[i] = (float)v; break;
    case DTYPE_F64: ((double *)d)[i] = v; break;
    case DTYPE_I32: ((int32_t *)d)[i] = (int32_t)v; break;
    case DTYPE_I64: ((int64_t *)d)[i] = (int64_t)v; break;
    default: ((uint8_t *)d)[i] = (uint8_t)v; break;
    }
}

static inline double pc_load(const struct tensor *t, int64_t i)
{
    const void *d = tensor_data(t);
    switch (t->dtype) {
    case DTYPE_F32: return ((const float *)d)[i];
    case DTYPE_F64: return ((const double *)d)[i];
    case DTYPE_I32: return ((const int32_t *)d)[i];
    case DTYPE_I64: return (double)((const int64_t *)d)[i];
    default: return ((const uint8_t *)d)[i];
    }
}

static inline struct tensor *pc_filled(enum dtype dt, int64_t n, int r)
{
    struct tensor *t = tensor_new(dt, DEVICE_CPU, 1, &n);
    for (int64_t i = 0; i < n; i++) pc_store(t, i, (double)pc_value(r, i));
    return t;
}

/* allreduce (sum, and average for floats), broadcast from the last rank,
 * over every dtype and several sizes (one past Gloo's 1 MiB segment); all
 * results exact. Then random floats: every rank ends bit-identical
 * (checked by allgather). Then a barrier proven by a file the last rank
 * writes just before entering it. */
static inline int pc_run_all(struct process_group *g, const char *flag_path, char *why, size_t cap)
{
    int r = pg_rank(g), n = pg_size(g);
    const int64_t sizes[] = {1, 5, 1000, 300001};
    for (int dt = 0; dt < DTYPE_COUNT; dt++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            int64_t len = sizes[s];
            bool fl = dt == DTYPE_F32 || dt == DTYPE_F64;
            for (int avg = 0; avg <= (fl ? 1 : 0); avg++) {
                struct tensor *t = pc_filled((enum dtype)dt, len, r);
                if (pg_allreduce(g, t, avg ? PG_AVG : PG_SUM) != 0) {
                    tensor_free(t);
                    return PC_FAIL("allreduce %s [%lld]: %s", dtype_name((enum dtype)dt), (long long)len, pg_last_error());
                }
                for (int64_t i = 0; i < len; i++) {
                    double want = 0;
                    for (int k = 0; k < n; k++) want += (double)pc_value(k, i);
                    if (avg) want = dt == DTYPE_F32 ? (double)((float)want / (float)n) : want / n;
                    if (pc_load(t, i) != want) {
                        double got = pc_load(t, i);
                        tensor_free(t);
                        return PC_FAIL("allreduce %s%s [%lld] element %lld: %.17g, expected %.17g",
                                       dtype_name((enum dtype)dt), avg ? " avg" : "", (long long)len, (long long)i,
                                       got, want);
                    }
                }
                tensor_free(t);
            }
            struct tensor *b = pc_filled((enum dtype)dt, len, r);
            if (pg_broadcast(g, b, n - 1) != 0) {
                tensor_free(b);
                return PC_FAIL("broadcast: %s", pg_last_error());
            }
            for (int64_t i = 0; i < len; i++)
                if (pc_load(b, i) != (double)pc_value(n - 1, i)) {
                    tensor_free(b);
                    return PC_FAIL("broadcast %s [%lld] element %lld", dtype_name((enum dtype)dt), (long long)len,
                                   (long long)i);
                }
            tensor_free(b);
        }

    /* random floats: ring order differs from a sequential sum, but every rank ends the same */
    int64_t len = 4099;
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &len), *all = NULL;
    uint64_t rng = 77 + (uint64_t)r;
    for (int64_t i = 0; i < len; i++) tensor_f32(t)[i] = (float)(rng_next(&rng) >> 40) / 16777216.0f - 0.5f;
    int64_t alen = len * n;
    all = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &alen);
    int rc = 0;
    if (pg_allreduce(g, t, PG_SUM) != 0 || pg_allgather(g, t, all) != 0) {
        rc = PC_FAIL("random allreduce/allgather: %s", pg_last_error());
    } else {
        for (int k = 0; k < n && rc == 0; k++)
            if (memcmp(tensor_f32(all) + k * len, tensor_f32(t), (size_t)len * sizeof(float)))
                rc = PC_FAIL("rank %d's allreduce result differs from rank %d's", k, r);
    }
    tensor_free(t);
    tensor_free(all);
    if (rc) return rc;

    if (r == n - 1) {
        FILE *f = fopen(flag_path, "w");
        if (!f) return PC_FAIL("cannot write %s", flag_path);
        fclose(f);
    }
    if (pg_barrier(g) != 0) return PC_FAIL("barrier: %s", pg_last_error());
    FILE *f = fopen(flag_path, "r");
    if (!f) return PC_FAIL("left the barrier before rank %d entered it", n - 1);
    fclose(f);
    if (pg_barrier(g) != 0) return PC_FAIL("barrier: %s", pg_last_error());
    if (r == n - 1) remove(flag_path);
    return pg_barrier(g) != 0 ? PC_FAIL("barrier: %s", pg_last_error()) : 0;
}

#endif
