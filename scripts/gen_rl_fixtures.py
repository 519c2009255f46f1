#!/usr/bin/python3
"""Writes tests/rl/fixtures/rl_fixtures.json: reference values for rl/rl_math.c
and rl/losses.c computed independently in PyTorch (Debian's python3-torch;
run with /usr/bin/python3), which tests/rl/test_rl_math.c replays without
torch.

The formulas are written the way the reference projects write them:
  - discounted returns and REINFORCE as pytorch/examples distributed/rpc/rl
    (Agent.finish_episode: eps = np.finfo(np.float32).eps);
  - GAE as CleanRL ppo.py (its dones[t] is the done that came with obs[t]),
    with time limits handled the Stable-Baselines3 way: a truncated, not
    terminated step's reward absorbs gamma * V(final observation);
  - the PPO minibatch loss and its diagnostics as CleanRL ppo.py, A2C as
    -mean(logp * adv) + vf_coef * 0.5 * mse - ent_coef * entropy;
  - log-probabilities and entropies through torch.distributions;
  - V-trace as IMPALA's paper writes it (an explicit sum, not a recursion),
    its on-policy cases checked against GAE with lambda = 1 (n-step returns).
Gradients come from torch's backward. Inputs are float32 values, stored
exactly; the GAE and returns references are computed in float64.
"""
import json
import os
import sys

import torch
from torch.distributions import Categorical, Normal

F32 = torch.float32
F64 = torch.float64


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


# ---- returns and normalisation -------------------------------------------------

def discounted_returns_example(rewards, gamma):
    """Agent.finish_episode's loop, in Python floats."""
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    return returns


def returns_cases(gen):
    cases = []
    for name, rewards, gamma in [
        ("cartpole_ones", [1.0] * 12, 0.99),
        ("random", flat(torch.randn(9, generator=gen, dtype=F32)), 0.9),
        ("gamma_zero", flat(torch.randn(5, generator=gen, dtype=F32)), 0.0),
        ("gamma_one", flat(torch.randn(6, generator=gen, dtype=F32)), 1.0),
        ("single", [2.5], 0.99),
    ]:
        cases.append({"name": name, "gamma": gamma, "rewards": rewards,
                      "returns": discounted_returns_example(rewards, gamma)})
    return cases


def normalize_cases(gen):
    cases = []
    for name, x, eps in [
        ("random", torch.randn(11, generator=gen, dtype=F32) * 3 + 1, 1e-8),
        ("two", torch.tensor([1.0, 4.0], dtype=F32), 1e-8),
        ("big_eps", torch.randn(6, generator=gen, dtype=F32), 0.5),
        ("constant", torch.full((5,), 2.0, dtype=F32), 1e-8),
    ]:
        x64 = x.to(F64)
        out = (x64 - x64.mean()) / (x64.std() + eps)
        cases.append({"name": name, "eps": eps, "x": flat(x), "out": flat(out)})
    return cases


# ---- GAE -------------------------------------------------------------------------

def gae_cleanrl(gamma, lam, rewards, values, term, trunc, final_values, next_value):
    """CleanRL ppo.py's loop over [T,B] float64 tensors, after the SB3
    time-limit fix of the rewards."""
    T = rewards.shape[0]
    rewards = rewards.clone()
    boot = trunc & ~term
    if final_values is not None:
        rewards[boot] += gamma * final_values[boot]
    else:
        assert not boot.any()
    step_done = (term | trunc).to(F64)
    dones = torch.zeros_like(rewards)     # CleanRL: the done that came with obs[t]
    dones[1:] = step_done[:-1]
    next_done = step_done[-1]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(T)):
        if t == T - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return advantages, advantages + values


def episode_ends(T, B, terminated_at, truncated_at):
    """[T,B] terminated and truncated flags set at the (t, b) listed."""
    term = torch.zeros(T, B, dtype=torch.bool)
    trunc = torch.zeros(T, B, dtype=torch.bool)
    for t, b in terminated_at:
        term[t, b] = True
    for t, b in truncated_at:
        trunc[t, b] = True
    return term, trunc


def gae_case(gen, name, T, B, gamma, lam, terminated_at, truncated_at, with_final=True):
    rewards = torch.randn(T, B, generator=gen, dtype=F32)
    values = torch.randn(T, B, generator=gen, dtype=F32)
    final_values = torch.randn(T, B, generator=gen, dtype=F32) * 2 if with_final else None
    next_values = torch.randn(B, generator=gen, dtype=F32)
    term, trunc = episode_ends(T, B, terminated_at, truncated_at)
    adv, ret = gae_cleanrl(gamma, lam, rewards.to(F64), values.to(F64), term, trunc,
                           None if final_values is None else final_values.to(F64), next_values.to(F64))
    return {
        "name": name, "T": T, "B": B, "gamma": gamma, "lambda": lam,
        "rewards": flat(rewards), "values": flat(values),
        "terminated": [bool(x) for x in term.reshape(-1).tolist()],
        "truncated": [bool(x) for x in trunc.reshape(-1).tolist()],
        "final_values": None if final_values is None else flat(final_values),
        "next_values": flat(next_values),
        "advantages": flat(adv), "returns": flat(ret),
    }


def gae_cases(gen):
    # env 0: terminated mid-rollout and again at the last step;
    # env 1: truncated mid-rollout (bootstraps from final_values);
    # env 2: terminated and truncated at once (terminated wins), then
    #        truncated at the last step (final_values, not next_values);
    # env 3: never done (bootstraps from next_values).
    term = [(2, 0), (6, 0), (4, 2)]
    trunc = [(3, 1), (4, 2), (6, 2)]
    return [
        gae_case(gen, "mixed_lambda095", 7, 4, 0.99, 0.95, term, trunc),
        gae_case(gen, "mixed_lambda1", 7, 4, 0.99, 1.0, term, trunc),
        gae_case(gen, "mixed_lambda0", 7, 4, 0.9, 0.0, term, trunc),
        gae_case(gen, "terminations_only_null_final", 5, 2, 0.97, 0.9, [(1, 0), (3, 1), (4, 1)], [],
                 with_final=False),
        gae_case(gen, "single_step", 1, 3, 0.99, 0.95, [(0, 0)], [(0, 1)]),
    ]


# ---- V-trace ------------------------------------------------------------------------

def vtrace_impala(gamma, rho_bar, c_bar, rewards, values, blogp, tlogp, term, trunc, final_values, next_value):
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018,
    IMPALA, eq. 1 and section 4.2) over [T,B] float64 tensors, written as
    the paper's explicit sum rather than a recursion:
      v_s = V_s + sum_{t>=s} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t,
      delta_t = rho_t (r_t + gamma V'_t - V_t),
      A_s = rho_s (r_s + gamma v'_{s+1} - V_s),
    rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu). The sum stops at
    the step that ends an episode; V'_t is 0 after a termination, V(final
    observation) after a truncation, else V_{t+1} (next_value after the last
    step); v'_{s+1} likewise with v_{s+1} in place of V_{s+1}."""
    T, B = rewards.shape
    ratio = torch.exp(tlogp - blogp)
    rho = torch.clamp(ratio, max=rho_bar)
    c = torch.clamp(ratio, max=c_bar)
    boot = trunc & ~term

    def next_v(t, b, inner):
        if term[t, b]:
            return 0.0
        if boot[t, b]:
            return float(final_values[t, b])
        return float(next_value[b]) if t == T - 1 else float(inner[t + 1, b])

    delta = torch.zeros(T, B, dtype=F64)
    for t in range(T):
        for b in range(B):
            delta[t, b] = rho[t, b] * (rewards[t, b] + gamma * next_v(t, b, values) - values[t, b])
    vs = torch.zeros(T, B, dtype=F64)
    for b in range(B):
        for s_ in range(T):
            total, weight = 0.0, 1.0
            for t in range(s_, T):
                total += weight * float(delta[t, b])
                if term[t, b] or trunc[t, b]:
                    break
                weight *= gamma * float(c[t, b])
            vs[s_, b] = values[s_, b] + total
    adv = torch.zeros(T, B, dtype=F64)
    for t in range(T):
        for b in range(B):
            adv[t, b] = rho[t, b] * (rewards[t, b] + gamma * next_v(t, b, vs) - values[t, b])
    return adv, vs


def vtrace_case(gen, name, T, B, gamma, rho_bar, c_bar, terminated_at, truncated_at, on_policy=False, spread=1.0):
    rewards = torch.randn(T, B, generator=gen, dtype=F32)
    values = torch.randn(T, B, generator=gen, dtype=F32)
    final_values = torch.randn(T, B, generator=gen, dtype=F32) * 2
    next_values = torch.randn(B, generator=gen, dtype=F32)
    blogp = -torch.rand(T, B, generator=gen, dtype=F32) * 2
    tlogp = blogp.clone() if on_policy else blogp + torch.randn(T, B, generator=gen, dtype=F32) * spread
    term, trunc = episode_ends(T, B, terminated_at, truncated_at)
    adv, vs = vtrace_impala(gamma, rho_bar, c_bar, rewards.to(F64), values.to(F64), blogp.to(F64), tlogp.to(F64),
                            term, trunc, final_values.to(F64), next_values.to(F64))
    case = {
        "name": name, "T": T, "B": B, "gamma": gamma, "rho_bar": rho_bar, "c_bar": c_bar,
        "rewards": flat(rewards), "values": flat(values),
        "behaviour_logp": flat(blogp), "target_logp": flat(tlogp),
        "terminated": [bool(x) for x in term.reshape(-1).tolist()],
        "truncated": [bool(x) for x in trunc.reshape(-1).tolist()],
        "final_values": flat(final_values), "next_values": flat(next_values),
        "advantages": flat(adv), "vs": flat(vs),
    }
    if on_policy:
        # the on-policy case is n-step returns: GAE with lambda = 1
        gadv, gret = gae_cleanrl(gamma, 1.0, rewards.to(F64), values.to(F64), term, trunc, final_values.to(F64),
                                 next_values.to(F64))
        assert torch.allclose(vs, gret, atol=1e-9) and torch.allclose(adv, gadv, atol=1e-9), name
    return case


def vtrace_cases(gen):
    # the GAE cases' episode ends: terminations, truncations, both at once
    term = [(2, 0), (6, 0), (4, 2)]
    trunc = [(3, 1), (4, 2), (6, 2)]
    return [
        vtrace_case(gen, "on_policy_nstep", 7, 4, 0.99, 1.0, 1.0, term, trunc, on_policy=True),
        vtrace_case(gen, "on_policy_bars_above_one", 6, 3, 0.95, 2.0, 1.5, [(1, 0)], [(3, 1)], on_policy=True),
        vtrace_case(gen, "off_policy_bars_one", 7, 4, 0.99, 1.0, 1.0, term, trunc),
        vtrace_case(gen, "off_policy_rho2_c05", 7, 4, 0.97, 2.0, 0.5, term, trunc, spread=1.5),
        vtrace_case(gen, "off_policy_no_ends", 9, 2, 0.9, 1.0, 1.0, [], [], spread=0.5),
        vtrace_case(gen, "single_step", 1, 3, 0.99, 1.0, 1.0, [(0, 0)], [(0, 1)]),
    ]


# ---- distributions ------------------------------------------------------------------

def dist_case(gen, name, kind, N, K, rowwise_log_std=False):
    c_logp = torch.randn(N, generator=gen, dtype=F32)
    c_ent = torch.randn(N, generator=gen, dtype=F32)
    case = {"name": name, "kind": kind, "N": N, "K": K, "coef_logp": flat(c_logp), "coef_ent": flat(c_ent)}
    if kind == "categorical":
        a = (torch.randn(N, K, generator=gen, dtype=F32) * 2).requires_grad_()
        actions = torch.randint(0, K, (N,), generator=gen)
        d = Categorical(logits=a)
        logp, ent = d.log_prob(actions), d.entropy()
        case["actions"] = [int(x) for x in actions.tolist()]
        log_std = None
    else:
        a = torch.randn(N, K, generator=gen, dtype=F32).requires_grad_()
        shape = (N, K) if rowwise_log_std else (K,)
        log_std = (torch.randn(shape, generator=gen, dtype=F32) * 0.5 - 0.3).requires_grad_()
        actions = a.detach() + torch.randn(N, K, generator=gen, dtype=F32)
        d = Normal(a, log_std.exp())
        logp, ent = d.log_prob(actions).sum(1), d.entropy().sum(1)
        case["actions"] = flat(actions)
        case["log_std_shape"] = list(shape)
        case["log_std"] = flat(log_std)
    ((logp * c_logp).sum() + (ent * c_ent).sum()).backward()
    case.update({"a": flat(a), "logp": flat(logp), "entropy": flat(ent), "grad_a": flat(a.grad)})
    if log_std is not None:
        case["grad_log_std"] = flat(log_std.grad)
    return case


def dist_cases(gen):
    return [
        dist_case(gen, "categorical", "categorical", 6, 4),
        dist_case(gen, "categorical_two", "categorical", 3, 2),
        dist_case(gen, "gaussian", "gaussian", 5, 3),
        dist_case(gen, "gaussian_rowwise_log_std", "gaussian", 4, 2, rowwise_log_std=True),
    ]


# ---- PPO, A2C, REINFORCE ---------------------------------------------------------------

# new_logp - old_logp per sample: inside (|.| small) and outside the 0.2 clip
# range on both sides, never near its edges (log 0.8 = -0.223, log 1.2 = 0.182).
LOGRATIOS = [-0.6, -0.15, -0.05, 0.0, 0.05, 0.12, 0.3, 0.7]
# the sign of the advantage for each: both signs where it matters
ADV_SIGNS = [-1, 1, -1, 1, 1, -1, 1, -1]
# new_values - old_values: inside and outside a 0.2 clip
VALUE_STEPS = [0.05, -0.5, 0.3, -0.1, 0.6, -0.25, 0.0, 0.15]


def ppo_reference(new_logp, entropy, newvalue, old_logp, adv, returns, old_values, h, weight):
    """CleanRL ppo.py's minibatch loss (times weight) and its diagnostics."""
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > h["clip"]).float().mean()
    mb_advantages = adv
    if h["norm_adv"]:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - h["clip"], 1 + h["clip"])
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    newvalue = newvalue.view(-1)
    if h["clip_vloss"]:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -h["clip"], h["clip"])
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = (pg_loss - h["ent_coef"] * entropy_loss + v_loss * h["vf_coef"]) * weight
    stats = {"policy_loss": float(pg_loss), "value_loss": float(v_loss), "entropy": float(entropy_loss),
             "approx_kl": float(approx_kl), "clipfrac": float(clipfrac)}
    return loss, stats


def ppo_case(gen, name, h, weight, mode="leaf", values_col=False):
    n = len(LOGRATIOS)
    case = {"name": name, "n": n, "hyper": h, "weight": weight, "mode": mode, "values_col": values_col}
    leaves = {}
    if mode == "leaf":
        new_logp = (torch.randn(n, generator=gen, dtype=F32) * 0.5 - 1.0).requires_grad_()
        entropy = (torch.rand(n, generator=gen, dtype=F32) + 0.5).requires_grad_()
        leaves.update(new_logp=new_logp, entropy=entropy)
    elif mode == "categorical":
        C = 3
        logits = torch.randn(n, C, generator=gen, dtype=F32).requires_grad_()
        actions = torch.randint(0, C, (n,), generator=gen)
        d = Categorical(logits=logits)
        new_logp, entropy = d.log_prob(actions), d.entropy()
        leaves.update(logits=logits)
        case.update(C=C, actions=[int(x) for x in actions.tolist()])
    else:   # gaussian: CleanRL ppo_continuous_action's state-independent log_std
        D = 2
        mean = torch.randn(n, D, generator=gen, dtype=F32).requires_grad_()
        log_std = (torch.randn(D, generator=gen, dtype=F32) * 0.3 - 0.5).requires_grad_()
        actions = mean.detach() + torch.randn(n, D, generator=gen, dtype=F32) * 0.5
        d = Normal(mean, log_std.exp())
        new_logp, entropy = d.log_prob(actions).sum(1), d.entropy().sum(1)
        leaves.update(mean=mean, log_std=log_std)
        case.update(D=D, actions=flat(actions))
    old_logp = (new_logp.detach() - torch.tensor(LOGRATIOS, dtype=F32))
    adv = (torch.rand(n, generator=gen, dtype=F32) * 2 + 0.2) * torch.tensor(ADV_SIGNS, dtype=F32)
    values = torch.randn((n, 1) if values_col else (n,), generator=gen, dtype=F32).requires_grad_()
    returns = values.detach().view(-1) + torch.randn(n, generator=gen, dtype=F32)
    old_values = values.detach().view(-1) - torch.tensor(VALUE_STEPS, dtype=F32)
    loss, stats = ppo_reference(new_logp, entropy, values, old_logp, adv, returns, old_values, h, weight)
    if mode != "leaf":
        new_logp.retain_grad()
        entropy.retain_grad()
    loss.backward()
    case.update({
        "new_logp": flat(new_logp), "entropy": flat(entropy), "new_values": flat(values),
        "old_logp": flat(old_logp), "adv": flat(adv), "returns": flat(returns), "old_values": flat(old_values),
        "loss": float(loss), "stats": stats,
        "grad_new_logp": flat(new_logp.grad), "grad_entropy": flat(entropy.grad), "grad_new_values": flat(values.grad),
    })
    for k, t in leaves.items():
        if k in ("logits", "mean", "log_std"):
            case[k] = flat(t)
            case["grad_" + k] = flat(t.grad)
    return case


def ppo_cases(gen):
    def hy(norm_adv, clip_vloss, ent_coef=0.01, vf_coef=0.5, clip=0.2):
        return {"clip": clip, "ent_coef": ent_coef, "vf_coef": vf_coef, "clip_vloss": clip_vloss, "norm_adv": norm_adv}
    return [
        ppo_case(gen, "norm_clipv", hy(True, True), 1.0),
        ppo_case(gen, "norm_noclipv", hy(True, False), 1.0),
        ppo_case(gen, "raw_clipv_weighted", hy(False, True, ent_coef=0.05, vf_coef=0.25), 0.375),
        ppo_case(gen, "raw_noclipv_col", hy(False, False), 1.0, values_col=True),
        ppo_case(gen, "categorical_logits", hy(True, True), 0.5, mode="categorical"),
        ppo_case(gen, "gaussian_mean_logstd", hy(True, True, ent_coef=0.0), 1.0, mode="gaussian"),
    ]


def a2c_case(gen, name, h, weight):
    n = 7
    logp = (torch.randn(n, generator=gen, dtype=F32) * 0.5 - 1.0).requires_grad_()
    entropy = (torch.rand(n, generator=gen, dtype=F32) + 0.5).requires_grad_()
    values = torch.randn(n, generator=gen, dtype=F32).requires_grad_()
    adv = torch.randn(n, generator=gen, dtype=F32)
    returns = values.detach() + torch.randn(n, generator=gen, dtype=F32)
    a = adv
    if h["norm_adv"]:
        a = (a - a.mean()) / (a.std() + 1e-8)
    pg = -(logp * a).mean()
    v = 0.5 * ((values - returns) ** 2).mean()
    ent = entropy.mean()
    loss = (pg + h["vf_coef"] * v - h["ent_coef"] * ent) * weight
    loss.backward()
    return {"name": name, "n": n, "hyper": h, "weight": weight,
            "logp": flat(logp), "entropy": flat(entropy), "values": flat(values),
            "adv": flat(adv), "returns": flat(returns), "loss": float(loss),
            "stats": {"policy_loss": float(pg), "value_loss": float(v), "entropy": float(ent)},
            "grad_logp": flat(logp.grad), "grad_entropy": flat(entropy.grad), "grad_values": flat(values.grad)}


def a2c_cases(gen):
    return [
        a2c_case(gen, "plain", {"clip": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "clip_vloss": False,
                                "norm_adv": False}, 1.0),
        a2c_case(gen, "norm_weighted", {"clip": 0.2, "ent_coef": 0.1, "vf_coef": 0.25, "clip_vloss": False,
                                        "norm_adv": True}, 0.25),
    ]


def reinforce_case(gen, name, rewards, gamma, col=False):
    """pytorch/examples distributed/rpc/rl Agent.finish_episode."""
    n = len(rewards)
    probs = torch.softmax(torch.randn(n, 2, generator=gen, dtype=F32), dim=1)
    m = Categorical(probs)
    action = torch.randint(0, 2, (n,), generator=gen)
    saved_log_probs = [m.log_prob(action)[i:i + 1] for i in range(n)]   # one [1] tensor per step
    eps = 1.1920928955078125e-07   # np.finfo(np.float32).eps
    returns = torch.tensor(discounted_returns_example(rewards, gamma))
    returns = (returns - returns.mean()) / (returns.std() + eps)
    policy_loss = [-log_prob * R for log_prob, R in zip(saved_log_probs, returns)]
    logp = torch.cat(saved_log_probs).detach().requires_grad_()   # the loss as a function of logp
    loss = torch.cat([-lp * R for lp, R in zip(logp.split(1), returns)]).sum()
    assert torch.allclose(loss, torch.cat(policy_loss).sum())
    loss.backward()
    return {"name": name, "n": n, "gamma": gamma, "col": col, "rewards": rewards, "logp": flat(logp),
            "loss": float(loss), "grad_logp": flat(logp.grad)}


def reinforce_cases(gen):
    return [
        reinforce_case(gen, "cartpole_ones", [1.0] * 15, 0.99),
        reinforce_case(gen, "random_col", flat(torch.randn(9, generator=gen, dtype=F32)), 0.9, col=True),
    ]


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240611)
    out = {
        "generator": "scripts/gen_rl_fixtures.py", "torch": torch.__version__,
        "returns": returns_cases(gen), "normalize": normalize_cases(gen), "gae": gae_cases(gen),
        "dist": dist_cases(gen), "ppo": ppo_cases(gen), "a2c": a2c_cases(gen),
        "reinforce": reinforce_cases(gen),
        "vtrace": vtrace_cases(gen),   # last: the cases above keep their random draws
    }
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    path = os.path.join(root, "tests", "rl", "fixtures", "rl_fixtures.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    count = sum(len(v) for v in out.values() if isinstance(v, list))
    print(f"wrote {count} cases to {os.path.relpath(path, root)}", file=sys.stderr)


if __name__ == "__main__":
    main()
