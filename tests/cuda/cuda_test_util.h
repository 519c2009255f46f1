/* Helpers shared by the files of the test_cuda runner: the two backends, a
 * seeded generator for random shapes and values, host/device copies and the
 * abs + rel*|ref| comparison. */
#ifndef TRIB_TESTS_CUDA_TEST_UTIL_H
#define TRIB_TESTS_CUDA_TEST_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/backend.h"

extern const struct tensor_backend *cpu, *gpu;
extern uint64_t test_rng;

int64_t rand_int(int64_t lo, int64_t hi);          /* uniform in [lo, hi] */
float rand_float(float lo, float hi);
float *host_floats(size_t n, float lo, float hi);  /* malloc'ed, random */
void *dev_copy(const void *host, size_t nbytes);   /* new device buffer */
void *host_copy_free(void *dev, size_t nbytes);    /* to a malloc'ed host copy; frees dev */
void assert_close(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol);

/* test_cuda_ops.c: the op-level CPU-vs-CUDA TCase; test_cuda_optim.c: the
 * optimizers on CUDA against the same steps on the CPU. */
void add_op_tests(Suite *s);
void add_optim_tests(Suite *s);

#endif
