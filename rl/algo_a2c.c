/* A2C as Stable-Baselines3's: PPO's shape (rollouts, an estimator,
 * minibatch updates, a value head) with the unclipped policy-gradient loss
 * (rl_a2c_loss); its preset has 5-step rollouts, lambda 1 (n-step
 * returns), one epoch of one minibatch. Its own table, not PPO's with other
 * parameters: the loss differs, and so do its statistics (no KL, no clip
 * fraction). */
#include "rl/algo_table.h"

#include "rl/algo_describe.h"
#include "rl/config_fields.h"

static struct tensor *minibatch_loss(const struct rl_mb_loss_in *in, struct rl_loss_stats *st)
{
    const struct rl_config *c = in->cfg;
    struct rl_ppo_hyper h = { .clip = c->clip, .ent_coef = c->ent_coef, .vf_coef = c->vf_coef,
                              .clip_vloss = c->clip_vloss, .norm_adv = c->norm_adv };
    return rl_a2c_loss(in->logp, in->entropy, in->values, in->adv, in->ret, in->n, &h, in->weight, st);
}

const struct rl_algo rl_algo_a2c = {
    .name = "a2c",
    .title = "A2C",
    .about = "A2C (Stable-Baselines3's): rollouts, n-step/GAE returns, policy gradient with a value head",
    .shape = RL_SHAPE_ROLLOUTS,
    .value_head = true,
    .stats = RL_STATS_VALUE,
    .stats_legend = "pg (policy loss), vf (value loss), ent (entropy)",
    .estimator = "gae",
    .mb_loss = minibatch_loss,
    .describe = rl_describe_rollouts,
};
