#!/usr/bin/python3
"""Writes tests/runfiles/fixtures/init_fixture.txt: the singular values of
the weights CleanRL's layer_init (torch.nn.init.orthogonal_ with gain std,
bias constant 0) gives the Agent of ppo_continuous_action.py (Hopper-v4's
shapes: 11 observations, 3 action dims) and of ppo.py (CartPole-v1's: 4
observations, 2 actions), plus torch.nn.init.orthogonal_ alone on tall,
wide and square matrices. tests/runfiles/test_init builds the same nets
with --init orthogonal's policy_arch_build and checks every weight has the
same singular values (orthogonal_ makes them all equal to the gain) and
every bias is 0. Run once with Debian's python3-torch (the test never runs
python):

    /usr/bin/python3 scripts/gen_init_fixtures.py

Format: one line per weight,
  <name> <rows> <cols> <max |bias|> <min(rows,cols) singular values, %.9g, descending>
names as Tributary's policy file's (actor.0.weight ...; CleanRL's actor_mean
is its actor, critic its critic); the bare matrices are named
orthogonal.<rows>x<cols>.gain<g> with bias "-" (none).
"""
import os

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "runfiles", "fixtures", "init_fixture.txt")


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):   # CleanRL's, line for line
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def cleanrl_continuous(obs, act):   # ppo_continuous_action.py's Agent
    critic = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                           layer_init(nn.Linear(64, 1), std=1.0))
    actor = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                          layer_init(nn.Linear(64, act), std=0.01))
    return actor, critic


def cleanrl_discrete(obs, n):   # ppo.py's Agent
    critic = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                           layer_init(nn.Linear(64, 1), std=1.0))
    actor = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                          layer_init(nn.Linear(64, n), std=0.01))
    return actor, critic


def sv(w):
    return torch.linalg.svdvals(w.detach().double()).tolist()


def line(name, w, bias):
    b = "-" if bias is None else "%.9g" % bias.detach().abs().max().item()
    return "%s %d %d %s %s" % (name, w.shape[0], w.shape[1], b, " ".join("%.9g" % s for s in sv(w)))


def main():
    torch.manual_seed(1)
    lines = []
    for tag, (actor, critic) in (("hopper", cleanrl_continuous(11, 3)), ("cartpole", cleanrl_discrete(4, 2))):
        for net, seq in (("actor", actor), ("critic", critic)):
            for i, m in enumerate(seq):
                if isinstance(m, nn.Linear):
                    lines.append(line("%s.%s.%d.weight" % (tag, net, i), m.weight, m.bias))
    for rows, cols, gain in ((5, 9, 1.0), (9, 5, 1.0), (7, 7, 2.5), (64, 11, 1.4142135623730951), (3, 64, 0.01)):
        w = torch.empty(rows, cols)
        nn.init.orthogonal_(w, gain)
        lines.append(line("orthogonal.%dx%d.gain%g" % (rows, cols, gain), w, None))
    with open(OUT, "w") as f:
        f.write("# made by scripts/gen_init_fixtures.py with torch %s\n" % torch.__version__)
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "weights")


if __name__ == "__main__":
    main()
