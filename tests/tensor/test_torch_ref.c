/* EmbeddingBag (sum, mean) and cross-entropy against values PyTorch
 * computed (fixtures/torch_ops.json, written once by
 * scripts/gen_tensor_fixtures.py with Debian's python3-torch; torch is not
 * needed here): outputs and gradients, empty bags and repeated indices
 * included. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "kit.h"

#ifndef TORCH_FIXTURE
#error "TORCH_FIXTURE must name the fixture file"
#endif

static cJSON *load(void)
{
    char *text = kit_must_read(TORCH_FIXTURE, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_msg(j != NULL, "bad JSON in %s", TORCH_FIXTURE);
    return j;
}

/* The numbers of array `key` of c, as floats and as int64 (cap entries). */
static int floats(const cJSON *c, const char *key, float *out, int cap)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, key)) { ck_assert_int_lt(n, cap); out[n++] = (float)v->valuedouble; }
    return n;
}

static int ints(const cJSON *c, const char *key, int64_t *out, int cap)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, key)) { ck_assert_int_lt(n, cap); out[n++] = (int64_t)v->valuedouble; }
    return n;
}

static int num(const cJSON *c, const char *key) { return cJSON_GetObjectItem(c, key)->valueint; }

static void assert_near(const char *what, int k, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-6f + 1e-5f * fabsf(want[i]), "case %d %s [%d]: %.8g, torch %.8g",
                      k, what, i, got[i], want[i]);
}

static void check_bag(const cJSON *c, int k)
{
    enum { CAP = 64 };
    float w[CAP], proj[CAP], out[CAP], grad[CAP];
    int64_t idx[CAP], off[CAP];
    int N = num(c, "num"), D = num(c, "dim");
    ck_assert_int_eq(floats(c, "weight", w, CAP), N * D);
    int L = ints(c, "indices", idx, CAP), B = ints(c, "offsets", off, CAP);
    ck_assert_int_eq(floats(c, "proj", proj, CAP), B * D);
    floats(c, "out", out, CAP);
    floats(c, "grad", grad, CAP);
    bool mean = !strcmp(cJSON_GetObjectItem(c, "mode")->valuestring, "mean");
    struct tensor *wt = tensor_from_f32(2, (int64_t[]){N, D}, w);
    tensor_set_requires_grad(wt, true);
    struct tensor *it = tensor_from_data(DTYPE_I64, 1, (int64_t[]){L}, idx);
    struct tensor *ot = tensor_from_data(DTYPE_I64, 1, (int64_t[]){B}, off);
    struct tensor *y = tensor_embedding_bag(wt, it, ot, mean ? TENSOR_BAG_MEAN : TENSOR_BAG_SUM);
    ck_assert_msg(y != NULL, "%s", tensor_last_error());
    assert_near(mean ? "mean output" : "sum output", k, tensor_f32(y), out, B * D);
    struct tensor *pt = tensor_from_f32(2, (int64_t[]){B, D}, proj);
    ck_assert_int_eq(tensor_backward(y, pt, false), 0);
    assert_near("weight gradient", k, tensor_f32(wt->grad), grad, N * D);
    struct tensor *all[] = {wt, it, ot, y, pt};
    for (int i = 0; i < 5; i++) tensor_free(all[i]);
}

static void check_xent(const cJSON *c, int k)
{
    enum { CAP = 64 };
    float logits[CAP], grad[CAP];
    int64_t target[CAP];
    int R = num(c, "rows"), C = num(c, "classes");
    ck_assert_int_eq(floats(c, "logits", logits, CAP), R * C);
    ck_assert_int_eq(ints(c, "target", target, CAP), R);
    floats(c, "grad", grad, CAP);
    struct tensor *lt = tensor_from_f32(2, (int64_t[]){R, C}, logits);
    tensor_set_requires_grad(lt, true);
    struct tensor *tt = tensor_from_data(DTYPE_I64, 1, (int64_t[]){R}, target);
    struct tensor *loss = tensor_cross_entropy(lt, tt);
    ck_assert_msg(loss != NULL, "%s", tensor_last_error());
    float want = (float)cJSON_GetObjectItem(c, "loss")->valuedouble;
    assert_near("loss", k, tensor_f32(loss), &want, 1);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    assert_near("logits gradient", k, tensor_f32(lt->grad), grad, R * C);
    struct tensor *all[] = {lt, tt, loss};
    for (int i = 0; i < 3; i++) tensor_free(all[i]);
}

START_TEST(test_against_torch)
{
    cJSON *j = load();
    int k = 0, bags = 0, xents = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        const char *op = cJSON_GetObjectItem(c, "op")->valuestring;
        if (!strcmp(op, "embedding_bag")) check_bag(c, k), bags++;
        else if (!strcmp(op, "cross_entropy")) check_xent(c, k), xents++;
        else ck_abort_msg("case %d: unknown op %s", k, op);
        k++;
    }
    ck_assert_int_eq(bags, 8);
    ck_assert_int_eq(xents, 4);
    cJSON_Delete(j);
}
END_TEST

KIT_MAIN("tensor_torch_ref",
         { "torch", 0, .tests = { test_against_torch } })
