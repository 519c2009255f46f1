#!/usr/bin/python3
"""Writes tests/optim/fixtures/optim_trajectories.json: reference optimizer
trajectories computed by PyTorch (Debian's python3-torch; run with
/usr/bin/python3), which tests/optim/test_optim.c replays without torch.

Each case: initial params, a fixed gradient sequence (null = no grad for that
param at that step), and the params after every step, plus the lr used at each
step (schedules) and the total norm returned by clip_grad_norm_ (clipping).
"""
import json
import os
import sys

import torch

STEPS = 20
SHAPES = [[3], [2, 3]]


def make_grads(gen, scale_by_step=False, skip=None):
    seq = []
    for s in range(STEPS):
        row = []
        for i, shape in enumerate(SHAPES):
            if skip and (s, i) in skip:
                row.append(None)
                continue
            g = torch.randn(shape, generator=gen, dtype=torch.float32)
            if scale_by_step:
                # norms well above and below the clip threshold
                g = g * (0.1 if s % 3 == 0 else 2.0)
            row.append(g)
        seq.append(row)
    return seq


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def run_case(name, kind, hyper, seed, clip=None, schedule=None, skip=None):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen, dtype=torch.float32).requires_grad_() for s in SHAPES]
    init = [flat(p) for p in params]
    grads = make_grads(gen, scale_by_step=clip is not None, skip=skip)

    h = dict(hyper)
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=h["lr"], momentum=h.get("momentum", 0),
                              dampening=h.get("dampening", 0), nesterov=h.get("nesterov", False),
                              weight_decay=h.get("weight_decay", 0), foreach=False)
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=h["lr"], betas=(h.get("beta1", 0.9), h.get("beta2", 0.999)),
                               eps=h.get("eps", 1e-8), weight_decay=h.get("weight_decay", 0),
                               amsgrad=h.get("amsgrad", False), foreach=False)
    elif kind == "adamw":
        opt = torch.optim.AdamW(params, lr=h["lr"], betas=(h.get("beta1", 0.9), h.get("beta2", 0.999)),
                                eps=h.get("eps", 1e-8), weight_decay=h.get("weight_decay", 1e-2),
                                amsgrad=h.get("amsgrad", False), foreach=False)
    elif kind == "rmsprop":
        opt = torch.optim.RMSprop(params, lr=h["lr"], alpha=h.get("alpha", 0.99), eps=h.get("eps", 1e-8),
                                  weight_decay=h.get("weight_decay", 0), momentum=h.get("momentum", 0),
                                  centered=h.get("centered", False), foreach=False)
    else:
        raise ValueError(kind)

    sched = None
    if schedule:
        sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=schedule["start_factor"],
                                                  end_factor=schedule["end_factor"],
                                                  total_iters=schedule["total_iters"])
    traj, lrs, norms = [], [], []
    for s in range(STEPS):
        for p, g in zip(params, grads[s]):
            p.grad = None if g is None else g.clone()
        if clip is not None:
            total = torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], clip)
            norms.append(float(total))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        traj.append([flat(p) for p in params])

    case = {
        "name": name, "kind": kind, "hyper": hyper, "steps": STEPS, "shapes": SHAPES,
        "init": init,
        "grads": [[None if g is None else flat(g) for g in row] for row in grads],
        "lrs": lrs, "trajectory": traj,
    }
    if clip is not None:
        case["clip_max_norm"] = clip
        case["total_norms"] = norms
    if schedule:
        case["schedule"] = schedule
    return case


def main():
    torch.set_num_threads(1)
    cases = [
        run_case("sgd_plain", "sgd", {"lr": 0.1}, 1),
        run_case("sgd_momentum", "sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1}, 2),
        run_case("sgd_nesterov_wd", "sgd",
                 {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, 3),
        run_case("adam", "adam", {"lr": 0.01}, 4),
        run_case("adam_wd_skip", "adam", {"lr": 0.01, "weight_decay": 0.1, "beta1": 0.8, "beta2": 0.99},
                 5, skip={(4, 1), (5, 1), (11, 0)}),
        run_case("adam_amsgrad", "adam", {"lr": 0.02, "amsgrad": True}, 6),
        run_case("adamw", "adamw", {"lr": 0.01, "weight_decay": 0.1}, 7),
        run_case("rmsprop", "rmsprop", {"lr": 0.01}, 8),
        run_case("rmsprop_centered_momentum", "rmsprop",
                 {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.01}, 9),
        run_case("sgd_momentum_clip", "sgd", {"lr": 0.1, "momentum": 0.9}, 10, clip=1.0),
        run_case("sgd_linear_warmup", "sgd", {"lr": 0.1, "momentum": 0.5}, 11,
                 schedule={"start_factor": 0.25, "end_factor": 1.0, "total_iters": 8}),
        run_case("adam_linear_decay", "adam", {"lr": 0.05}, 12,
                 schedule={"start_factor": 1.0, "end_factor": 0.1, "total_iters": 10}),
    ]
    out = {"generator": "scripts/gen_optim_fixtures.py", "torch": torch.__version__, "cases": cases}
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    path = os.path.join(root, "tests", "optim", "fixtures", "optim_trajectories.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.relpath(path, root)}", file=sys.stderr)


if __name__ == "__main__":
    main()
