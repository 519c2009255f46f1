/* vpg-train: tributary-train with one more algorithm, defined here, outside
 * rl/, through the public table (rl/algo.h; docs/extending.md walks
 * through it): vanilla policy gradient with a learned baseline.
 *   loss = weight * (-mean(logp * A) + vf_coef * 0.5 * mean((V - R)^2)),
 * A and R the rollout's n-step returns' advantages and returns (the
 * "nstep" estimator), A not normalised, no entropy bonus, no clipping.
 * It registers the algorithm, then runs tributary-train's own main
 * (programs/tributary_train.c, built with main renamed): the agent and the observers it
 * forks all hold "vpg-ext" in their registries, so --algo vpg-ext resolves
 * everywhere, on the command line and on the wire. */
#include <stdio.h>
#include <string.h>

#include "rl/algo.h"
#include "rl/algo_describe.h"
#include "rl/config.h"
#include "rl/rl.h"
#include "tensor/ops.h"

int tributary_train_main(int argc, char **argv);

/* -mean(logp * adv) and 0.5 * mean((V - R)^2): new scalars, or NULL. */
static struct tensor *pg_term(struct tensor *logp, const float *adv, int n)
{
    int64_t len = n;
    struct tensor *a = tensor_from_f32(1, &len, adv), *lp = tensor_reshape(logp, 1, &len);
    struct tensor *prod = a && lp ? tensor_mul(lp, a) : NULL, *mean = prod ? tensor_mean(prod) : NULL;
    struct tensor *neg = mean ? tensor_neg(mean) : NULL;
    tensor_free(a);
    tensor_free(lp);
    tensor_free(prod);
    tensor_free(mean);
    return neg;
}

static struct tensor *vf_term(struct tensor *values, const float *ret, int n)
{
    int64_t len = n;
    struct tensor *r = tensor_from_f32(1, &len, ret), *v = tensor_reshape(values, 1, &len);
    struct tensor *d = r && v ? tensor_sub(v, r) : NULL, *sq = d ? tensor_mul(d, d) : NULL;
    struct tensor *mean = sq ? tensor_mean(sq) : NULL, *half = mean ? tensor_mul_scalar(mean, 0.5f) : NULL;
    tensor_free(r);
    tensor_free(v);
    tensor_free(d);
    tensor_free(sq);
    tensor_free(mean);
    return half;
}

static struct tensor *vpg_loss(const struct rl_mb_loss_in *in, struct rl_loss_stats *st)
{
    struct tensor *pg = pg_term(in->logp, in->adv, in->n), *vf = pg ? vf_term(in->values, in->ret, in->n) : NULL;
    struct tensor *wvf = vf ? tensor_mul_scalar(vf, (float)in->cfg->vf_coef) : NULL;
    struct tensor *sum = wvf ? tensor_add(pg, wvf) : NULL, *loss = sum ? tensor_mul_scalar(sum, (float)in->weight) : NULL;
    if (loss) *st = (struct rl_loss_stats){ .policy_loss = *(const float *)tensor_data(pg),
                                            .value_loss = *(const float *)tensor_data(vf) };
    else rl_set_error("vpg loss: %s", tensor_last_error());
    tensor_free(pg);
    tensor_free(vf);
    tensor_free(wvf);
    tensor_free(sum);
    return loss;
}

static int vpg_check(const struct rl_config *cfg)
{
    if (cfg->epochs != 1) return rl_set_error("--algo vpg-ext makes one pass over a rollout: --epochs must be 1");
    return 0;
}

static const struct rl_algo vpg = {
    .name = "vpg-ext",   /* a name no built-in takes (docs/extending.md adds "pg") */
    .title = "VPG",
    .about = "vanilla policy gradient with a learned baseline (tests/rl/vpg_train.c)",
    .shape = RL_SHAPE_ROLLOUTS,
    .value_head = true,
    .stats = RL_STATS_VALUE,
    .stats_legend = "pg (policy loss), vf (value loss), ent (not computed: 0)",
    .estimator = "nstep",
    .mb_loss = vpg_loss,
    .describe = rl_describe_rollouts,
    .check = vpg_check,
};

int main(int argc, char **argv)
{
    if (rl_algo_register(&vpg) < 0) {
        fprintf(stderr, "vpg-train: %s\n", rl_last_error());
        return 2;
    }
    return tributary_train_main(argc, argv);
}
