/* Element-wise ops (ops.h): broadcasting binary ops, scalar ops and unary
 * maths, forward and backward, over the backend table. */
#include "common/check.h"
#include "tensor/ops_internal.h"

/* ---- binary ------------------------------------------------------------------ */

static int binary_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0];
    if (!g) return 0;
    if (op_check_saved(n) < 0) return -1;
    bool wa = op_wants(n, 0), wb = op_wants(n, 1);
    struct tensor *a = c->n_saved ? c->saved[0] : NULL, *b = c->n_saved ? c->saved[1] : NULL;
    struct tensor *ta = NULL, *tb = NULL;
    switch ((enum kbinary)c->iv[0]) {
    case KB_ADD:
        ta = tensor_retain(g);
        tb = tensor_retain(g);
        break;
    case KB_SUB:
        ta = tensor_retain(g);
        tb = wb ? k_unary(KU_NEG, g, 0, 0) : NULL;
        break;
    case KB_MUL:
        ta = wa ? k_binary(KB_MUL, g, b) : NULL;
        tb = wb ? k_binary(KB_MUL, g, a) : NULL;
        break;
    case KB_DIV:   /* d/da = 1/b, d/db = -a/b^2 */
        ta = wa ? k_binary(KB_DIV, g, b) : NULL;
        if (wb) {
            tb = k_binary(KB_MUL, g, a);
            k_binary_into(tb, KB_DIV, tb, b);
            k_binary_into(tb, KB_DIV, tb, b);
            k_unary_into(tb, KU_NEG, tb, 0, 0);
        }
        break;
    case KB_MIN:
    case KB_MAX:   /* the gradient goes to the chosen input; a wins ties */
        ta = c->iv[0] == KB_MIN ? k_binary(KB_GE, b, a) : k_binary(KB_GE, a, b);
        k_binary_into(ta, KB_MUL, g, ta);
        tb = wb ? k_binary(KB_SUB, g, ta) : NULL;
        break;
    default:
        CHECK(!"bad binary op");
    }
    gin[0] = wa ? k_sum_to(ta, c->ndim[0], c->shape[0]) : NULL;
    gin[1] = wb ? k_sum_to(tb, c->ndim[1], c->shape[1]) : NULL;
    tensor_free(ta);
    tensor_free(tb);
    return 0;
}

static struct tensor *binary_op(const char *who, const char *name, enum kbinary op,
                                struct tensor *a, struct tensor *b)
{
    int nd;
    int64_t shape[TENSOR_MAX_DIMS];
    if (op_check_pair(who, a, b) < 0 || op_broadcast_shape(who, a, b, &nd, shape) < 0) return NULL;
    struct tensor *sa = tensor_snapshot(a), *sb = tensor_snapshot(b);
    struct tensor *out = k_binary(op, sa, sb);
    struct tensor *in[2] = {a, b};
    if (op_needs_grad(2, in)) {
        struct op_ctx *c = op_ctx_new();
        c->iv[0] = op;
        op_ctx_shape(c, 0, a);
        op_ctx_shape(c, 1, b);
        if (op != KB_ADD && op != KB_SUB) {
            op_ctx_save(c, sa);
            op_ctx_save(c, sb);
            sa = sb = NULL;
        }
        op_record(name, out, 2, in, c, binary_backward);
    }
    tensor_free(sa);
    tensor_free(sb);
    return out;
}

struct tensor *tensor_add(struct tensor *a, struct tensor *b) { return binary_op("tensor_add", "AddBackward", KB_ADD, a, b); }
struct tensor *tensor_sub(struct tensor *a, struct tensor *b) { return binary_op("tensor_sub", "SubBackward", KB_SUB, a, b); }
struct tensor *tensor_mul(struct tensor *a, struct tensor *b) { return binary_op("tensor_mul", "MulBackward", KB_MUL, a, b); }
struct tensor *tensor_div(struct tensor *a, struct tensor *b) { return binary_op("tensor_div", "DivBackward", KB_DIV, a, b); }
struct tensor *tensor_minimum(struct tensor *a, struct tensor *b) { return binary_op("tensor_minimum", "MinimumBackward", KB_MIN, a, b); }
struct tensor *tensor_maximum(struct tensor *a, struct tensor *b) { return binary_op("tensor_maximum", "MaximumBackward", KB_MAX, a, b); }

/* ---- unary ------------------------------------------------------------------- */

/* Which tensor each unary op's backward needs: 0 none, 1 its input, 2 its output. */
static int unary_saves(enum kunary op)
{
    switch (op) {
    case KU_LOG: case KU_SQUARE: case KU_CLAMP: return 1;
    case KU_RELU: case KU_TANH: case KU_EXP: case KU_SQRT: return 2;
    default: return 0;
    }
}

static int unary_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *s = c->n_saved ? c->saved[0] : NULL;
    if (!g || !op_wants(n, 0)) return 0;
    if (op_check_saved(n) < 0) return -1;
    switch ((enum kunary)c->iv[0]) {
    case KU_NEG: gin[0] = k_unary(KU_NEG, g, 0, 0); break;
    case KU_SCALE: gin[0] = k_unary(KU_SCALE, g, c->a, 0); break;
    case KU_ADD_SCALAR: gin[0] = tensor_retain(g); break;
    case KU_LOG: gin[0] = k_binary(KB_DIV, g, s); break;
    case KU_EXP: gin[0] = k_binary(KB_MUL, g, s); break;
    case KU_RELU:
    case KU_CLAMP:   /* g * mask, the mask computed in place of the result */
        gin[0] = c->iv[0] == KU_RELU ? k_unary(KU_STEP, s, 0, 0) : k_unary(KU_INSIDE, s, c->a, c->b);
        k_binary_into(gin[0], KB_MUL, g, gin[0]);
        break;
    case KU_SQUARE:
        gin[0] = k_binary(KB_MUL, g, s);
        k_unary_into(gin[0], KU_SCALE, gin[0], 2.0f, 0);
        break;
    case KU_SQRT:
        gin[0] = k_binary(KB_DIV, g, s);
        k_unary_into(gin[0], KU_SCALE, gin[0], 0.5f, 0);
        break;
    case KU_TANH:   /* g * (1 - y^2) */
        gin[0] = k_unary(KU_SQUARE, s, 0, 0);
        k_unary_into(gin[0], KU_SCALE, gin[0], -1.0f, 0);
        k_unary_into(gin[0], KU_ADD_SCALAR, gin[0], 1.0f, 0);
        k_binary_into(gin[0], KB_MUL, g, gin[0]);
        break;
    default:
        CHECK(!"bad unary op");
    }
    return 0;
}

static struct tensor *unary_op(const char *who, const char *name, enum kunary op,
                               struct tensor *x, float a, float b)
{
    if (op_check_f32(who, x) < 0) return NULL;
    struct tensor *sx = tensor_snapshot(x);
    struct tensor *out = k_unary(op, sx, a, b);
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        c->iv[0] = op;
        c->a = a;
        c->b = b;
        int saves = unary_saves(op);
        if (saves == 1) {
            op_ctx_save(c, sx);
            sx = NULL;
        } else if (saves == 2) {
            op_ctx_save(c, tensor_snapshot(out));
        }
        op_record(name, out, 1, &x, c, unary_backward);
    }
    tensor_free(sx);
    return out;
}

struct tensor *tensor_add_scalar(struct tensor *x, float s) { return unary_op("tensor_add_scalar", "AddScalarBackward", KU_ADD_SCALAR, x, s, 0); }
struct tensor *tensor_mul_scalar(struct tensor *x, float s) { return unary_op("tensor_mul_scalar", "MulScalarBackward", KU_SCALE, x, s, 0); }
struct tensor *tensor_neg(struct tensor *x) { return unary_op("tensor_neg", "NegBackward", KU_NEG, x, 0, 0); }
struct tensor *tensor_relu(struct tensor *x) { return unary_op("tensor_relu", "ReluBackward", KU_RELU, x, 0, 0); }
struct tensor *tensor_tanh(struct tensor *x) { return unary_op("tensor_tanh", "TanhBackward", KU_TANH, x, 0, 0); }
struct tensor *tensor_exp(struct tensor *x) { return unary_op("tensor_exp", "ExpBackward", KU_EXP, x, 0, 0); }
struct tensor *tensor_log(struct tensor *x) { return unary_op("tensor_log", "LogBackward", KU_LOG, x, 0, 0); }
struct tensor *tensor_square(struct tensor *x) { return unary_op("tensor_square", "SquareBackward", KU_SQUARE, x, 0, 0); }
struct tensor *tensor_sqrt(struct tensor *x) { return unary_op("tensor_sqrt", "SqrtBackward", KU_SQRT, x, 0, 0); }

struct tensor *tensor_clamp(struct tensor *x, float lo, float hi)
{
    if (!(lo <= hi)) return tensor_error("tensor_clamp: lo %g is greater than hi %g", (double)lo, (double)hi);
    return unary_op("tensor_clamp", "ClampBackward", KU_CLAMP, x, lo, hi);
}
