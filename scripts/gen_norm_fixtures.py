#!/usr/bin/python3
"""Writes tests/rl/fixtures/norm_fixture.txt: the observation and reward
normalisation of CleanRL's ppo_continuous_action.py (Gymnasium 0.28/0.29's
RunningMeanStd, NormalizeObservation, TransformObservation(clip),
NormalizeReward, TransformReward(clip)) over a made-up run of 2 envs, for
tests/rl/test_rl_norm.c, which replays it against rl/norm.c without numpy.
Run with Debian's numpy: /usr/bin/python3 scripts/gen_norm_fixtures.py.

The classes below are Gymnasium's, line for line, on a vector env (one
RunningMeanStd over the batch of both envs, as rl/norm.c keeps one set per
run). One deliberate difference, also rl/norm.c's: a batch's moments are
taken in float64 (x.astype(np.float64)); numpy's np.mean/np.var of the
float32 batch a vector env returns round them to float32 (identical for one
env, CleanRL's layout, whose batch is one row).

Format (one record per line, numbers as %.17g; inputs are float32 values,
written exactly):
  header D B N gamma clip_obs clip_reward eps
  reset  <B*D raw obs>
  then for the reset and for each of the N steps:
  step   <B term 0/1> <B raw rewards> <B*D raw obs>      (steps only)
  nobs   <B*D normalised obs (float64, before the float32 cast)>
  nrew   <B normalised rewards>                          (steps only)
  obsrms <count> <D means> <D vars>
  retrms <count> <mean> <var>                            (steps only)
"""
import os
import numpy as np


def update_mean_var_count_from_moments(mean, var, count, batch_mean, batch_var, batch_count):
    delta = batch_mean - mean
    tot_count = count + batch_count
    new_mean = mean + delta * batch_count / tot_count
    m_a = var * count
    m_b = batch_var * batch_count
    M2 = m_a + m_b + np.square(delta) * count * batch_count / tot_count
    new_var = M2 / tot_count
    new_count = tot_count
    return new_mean, new_var, new_count


class RunningMeanStd:
    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, "float64")
        self.var = np.ones(shape, "float64")
        self.count = epsilon

    def update(self, x):
        x = np.asarray(x).astype(np.float64)   # the one difference: float64 batch moments
        batch_mean = np.mean(x, axis=0)
        batch_var = np.var(x, axis=0)
        batch_count = x.shape[0]
        self.update_from_moments(batch_mean, batch_var, batch_count)

    def update_from_moments(self, batch_mean, batch_var, batch_count):
        self.mean, self.var, self.count = update_mean_var_count_from_moments(
            self.mean, self.var, self.count, batch_mean, batch_var, batch_count)


class NormalizeObservation:   # is_vector_env, then TransformObservation(clip)
    def __init__(self, shape, clip, epsilon=1e-8):
        self.obs_rms = RunningMeanStd(shape=shape)
        self.epsilon = epsilon
        self.clip = clip

    def normalize(self, obs):
        self.obs_rms.update(obs)
        out = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip)


class NormalizeReward:   # is_vector_env, then TransformReward(clip)
    def __init__(self, num_envs, clip, gamma=0.99, epsilon=1e-8):
        self.return_rms = RunningMeanStd(shape=())
        self.returns = np.zeros(num_envs)
        self.gamma = gamma
        self.epsilon = epsilon
        self.clip = clip

    def step(self, rews, terminateds):
        self.returns = self.returns * self.gamma * (1 - terminateds) + rews
        rews = self.normalize(rews)
        return np.clip(rews, -self.clip, self.clip)

    def normalize(self, rews):
        self.return_rms.update(self.returns)
        return rews / np.sqrt(self.return_rms.var + self.epsilon)


def fmt(xs):
    return " ".join("%.17g" % float(x) for x in np.asarray(xs, dtype=np.float64).ravel())


def main():
    D, B, N, gamma, clip_obs, clip_reward = 3, 2, 60, 0.99, 10.0, 10.0
    rng = np.random.default_rng(25)
    scale = np.array([1.0, 30.0, 0.01])
    offset = np.array([0.5, -40.0, 2.0])
    obs_n = NormalizeObservation((D,), clip_obs)
    rew_n = NormalizeReward(B, clip_reward, gamma)
    lines = ["header %d %d %d %s %s %s %s" % (D, B, N, fmt([gamma]), fmt([clip_obs]), fmt([clip_reward]), fmt([1e-8]))]

    def obs_records(raw):
        lines.append("nobs " + fmt(obs_n.normalize(raw)))
        r = obs_n.obs_rms
        lines.append("obsrms " + fmt([r.count]) + " " + fmt(r.mean) + " " + fmt(r.var))

    raw = (rng.standard_normal((B, D)) * scale + offset).astype(np.float32)
    lines.append("reset " + fmt(raw))
    obs_records(raw)
    for t in range(N):
        term = (rng.random(B) < 0.1).astype(np.float64)
        # rewards: mostly around 1, a few large ones so the clip is reached
        rew = (rng.standard_normal(B) + 1.0).astype(np.float32)
        if t % 17 == 5:
            rew[0] = np.float32(400.0)
        raw = (rng.standard_normal((B, D)) * scale + offset).astype(np.float32)
        if t == 55:
            raw[1, 1] = np.float32(5000.0)   # an outlier that the obs clip bounds
        lines.append("step " + fmt(term) + " " + fmt(rew) + " " + fmt(raw))
        obs_records(raw)
        lines.append("nrew " + fmt(rew_n.step(rew.astype(np.float64), term)))
        r = rew_n.return_rms
        lines.append("retrms " + fmt([r.count]) + " " + fmt([r.mean]) + " " + fmt([r.var]))
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "tests", "rl", "fixtures", "norm_fixture.txt")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.normpath(out), len(lines), "lines")


if __name__ == "__main__":
    main()
