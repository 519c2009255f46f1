/* REINFORCE as PyTorch's RPC RL example: one episode per observer, a
 * recorded forward per step, the discounted and normalised returns as
 * weights (rl_reinforce_loss); no critic. */
#include "rl/algo_table.h"

#include "rl/algo_describe.h"
#include "rl/config_fields.h"
#include "rl/rl.h"

static struct tensor *episode_loss(struct tensor *logp, const float *rewards, int n, const struct rl_config *cfg)
{
    return rl_reinforce_loss(logp, rewards, n, cfg->gamma);
}

static int check(const struct rl_config *c)
{
    if (c->envs_per_observer != 1)
        return rl_set_error("--algo reinforce runs one episode per observer: --envs-per-observer must be 1");
    return 0;
}

const struct rl_algo rl_algo_reinforce = {
    .name = "reinforce",
    .title = "REINFORCE",
    .about = "REINFORCE (PyTorch's RPC RL example): one episode per observer, no critic",
    .shape = RL_SHAPE_EPISODES,
    .value_head = false,
    .discrete_only = true,
    .stats = 0,
    .stats_legend = "loss (REINFORCE's policy loss)",
    .ep_loss = episode_loss,
    .describe = rl_describe_episodes,
    .check = check,
};
