/* PPO as CleanRL's ppo.py: rollouts, GAE, epochs x minibatches of the
 * clipped surrogate loss with a value head (rl_ppo_loss). */
#include "rl/algo_table.h"

#include <stdio.h>

#include "rl/algo_describe.h"
#include "rl/config_fields.h"

static struct tensor *minibatch_loss(const struct rl_mb_loss_in *in, struct rl_loss_stats *st)
{
    const struct rl_config *c = in->cfg;
    struct rl_ppo_hyper h = { .clip = c->clip, .ent_coef = c->ent_coef, .vf_coef = c->vf_coef,
                              .clip_vloss = c->clip_vloss, .norm_adv = c->norm_adv };
    return rl_ppo_loss(in->logp, in->entropy, in->values, in->old_logp, in->prox_logp, in->adv, in->ret, in->old_values,
                       in->n, &h, in->weight, st);
}

/* the rollouts' description, the update's with its epochs, minibatches and clip */
static void describe(const struct rl_config *c, char *shape, size_t shape_cap, char *update, size_t update_cap)
{
    rl_describe_rollouts(c, shape, shape_cap, update, update_cap);
    snprintf(update, update_cap, "gamma %g, lambda %g, %d epoch%s x %d minibatch%s, clip %g", c->gamma, c->gae_lambda,
             c->epochs, c->epochs == 1 ? "" : "s", c->minibatches, c->minibatches == 1 ? "" : "es", c->clip);
    rl_describe_async_minibatches(c, update, update_cap);
}

const struct rl_algo rl_algo_ppo = {
    .name = "ppo",
    .title = "PPO",
    .about = "PPO (CleanRL's ppo.py): rollouts, GAE, clipped surrogate, value head",
    .shape = RL_SHAPE_ROLLOUTS,
    .value_head = true,
    .stats = RL_STATS_VALUE | RL_STATS_CLIP,
    .stats_legend = "pg (policy loss), vf (value loss), ent (entropy), kl (approx KL), clip (clip fraction)",
    .estimator = "gae",
    .prox = true,
    .mb_loss = minibatch_loss,
    .describe = describe,
};
