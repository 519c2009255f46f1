#!/usr/bin/python3
"""Writes tests/tensor/fixtures/torch_ops.json: EmbeddingBag (sum, mean) and
cross-entropy computed by PyTorch (Debian's python3-torch; run with
/usr/bin/python3), which tests/tensor/test_torch_ref.c replays without torch.

Each embedding_bag case: weight, indices, offsets, mode, the output, and the
weight's gradient of sum(output * proj) for a given proj. Each cross_entropy
case: logits, target, the loss and the logits' gradient.
"""
import json
import os

import torch
import torch.nn.functional as F


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


gen = torch.Generator().manual_seed(1234)
cases = []
# (num, dim, indices, offsets): repeats, an empty bag in the middle and at the end
bags = [
    (10, 3, [1, 2, 4, 5, 4, 3, 2, 9], [0, 4]),
    (6, 4, [0, 0, 5, 2, 2, 2, 1], [0, 1, 3, 3, 6]),
    (5, 2, [3, 1, 4], [0, 3]),
    (7, 5, [6], [0]),
]
for num, dim, idx, off in bags:
    for mode in ("sum", "mean"):
        w = torch.randn(num, dim, generator=gen, dtype=torch.float32).requires_grad_()
        out = F.embedding_bag(torch.tensor(idx), w, torch.tensor(off), mode=mode)
        proj = torch.randn(out.shape, generator=gen, dtype=torch.float32)
        (out * proj).sum().backward()
        cases.append({"op": "embedding_bag", "mode": mode, "num": num, "dim": dim, "indices": idx,
                      "offsets": off, "weight": flat(w), "proj": flat(proj), "out": flat(out),
                      "grad": flat(w.grad)})

for rows, classes, scale in ((4, 3, 1.0), (5, 8, 4.0), (1, 2, 0.5), (3, 1, 1.0)):
    logits = (torch.randn(rows, classes, generator=gen, dtype=torch.float32) * scale).requires_grad_()
    target = torch.randint(0, classes, (rows,), generator=gen)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    cases.append({"op": "cross_entropy", "rows": rows, "classes": classes, "logits": flat(logits),
                  "target": [int(x) for x in target.tolist()], "loss": float(loss), "grad": flat(logits.grad)})

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tensor", "fixtures",
                    "torch_ops.json")
with open(path, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
    f.write("\n")
print(f"wrote {len(cases)} cases to {os.path.normpath(path)}")
