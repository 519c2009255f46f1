#!/usr/bin/python3
"""Writes tests/runfiles/fixtures/export/: policy.safetensors, a Hopper-v4-
shaped Gaussian policy with observation statistics written by Tributary's
own writer (BUILD/tests/runfiles/test_export --write, a fixed seed), and
actions.json, the greedy actions that README.md's PyTorch snippet gives for
a set of observations. The snippet is the README's own code block (the
```python block that defines greedy_action), executed here as it is, with
Debian's python3-torch alone (run with /usr/bin/python3; no `safetensors`
package). tests/runfiles/test_export checks Tributary gives the same actions.

    /usr/bin/python3 scripts/gen_export_fixtures.py [BUILD_DIR]   # default build-dev
"""
import json
import os
import re
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "runfiles", "fixtures", "export")
ROWS, WIDE = 40, 8        # observations near the statistics, then far outside them


def readme_snippet():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def greedy_action(" in b]
    if len(blocks) != 1:
        sys.exit(f"README.md: {len(blocks)} python blocks define greedy_action, expected 1")
    return blocks[0]


def run_snippet(code, path, obs):
    # the block ends with an example call on a path of its own: run the
    # definitions, then call greedy_action on the fixture
    defs = code[: code.index("\nprint(greedy_action(")] if "\nprint(greedy_action(" in code else code
    ns = {}
    exec(compile(defs, "README.md", "exec"), ns)
    return ns["greedy_action"](path, obs)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-dev")
    os.makedirs(OUT, exist_ok=True)
    subprocess.run([os.path.join(build, "tests", "runfiles", "test_export"), "--write", OUT], check=True)
    path = os.path.join(OUT, "policy.safetensors")
    g = torch.Generator().manual_seed(25)
    obs = torch.cat([torch.randn(ROWS, 11, generator=g) * 2, torch.randn(WIDE, 11, generator=g) * 50])
    obs = obs.float()     # what an env gives: float32, exact in the JSON below
    act = run_snippet(readme_snippet(), path, obs)
    assert act.shape == (ROWS + WIDE, 3) and act.dtype == torch.float32, (act.shape, act.dtype)
    def rows(t):
        return ",\n".join("  " + json.dumps([float(v) for v in row]) for row in t)
    with open(os.path.join(OUT, "actions.json"), "w") as f:
        f.write('{"written_by": %s,\n "policy": "policy.safetensors",\n "obs": [\n%s\n ],\n "actions": [\n%s\n ]}\n'
                % (json.dumps("scripts/gen_export_fixtures.py: README.md's snippet, torch " + torch.__version__),
                   rows(obs), rows(act)))
    print(os.path.join(OUT, "actions.json"))


if __name__ == "__main__":
    main()
