#!/usr/bin/env python3
"""fused_ab.py: the iteration with the dots in the epilogue of A's SpMV against the same plan
with the reduction apart (GPU host).

For each matrix and preconditioner: `autopcg generate M --model MODEL --precond P` writes the
model's plan (plan.json); a copy without `fused_dots` is the same plan with the three-dot
reduction after the SpMV. Both run with `autopcg solve M --plan ... --device gpu --json`,
alternating, ROUNDS times; the table gives the medians of microseconds per iteration
(solve_ms / iterations), whether the model fused, its predicted excess and reduction (from the
plan's `dots` explanation), and the ratio fused / apart. Where the model keeps the dots apart,
the fused launch it rejected (the runner-up of its `dots` explanation, `... t<threads>
b<blocks> ...`) is put into a copy of the plan and runs as well, so that every decision is
measured both ways; where A has no dot3 variant only the plan as chosen runs.

    python3 tools/fused_ab.py --autopcg .gpu-bundle/bin/autopcg --model models/nvidia-h200.json \\
        --precond none,jacobi gen:poisson3d:192 gen:poisson3d-27pt:128 [--rounds 3] [--json F]

Matrix specs: a .mtx path, gen:FAMILY:N (`autopcg matgen FAMILY --n N`) or kron:FILE:G
(`autopcg matgen --kron FILE --n G`), generated once into --out-dir.
"""
import argparse
import copy
import json
import os
import re
import statistics
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_bench import make_matrix, note  # noqa: E402  (the matrix specs e2e_bench reads)


def gpu_choice(plan):
    """The GPU plan choice inside a plan.json of one block."""
    blocks = plan.get("blocks") or []
    if len(blocks) != 1 or not isinstance(blocks[0].get("choice"), dict):
        raise KeyError("expected a plan of one block with a GPU choice")
    return blocks[0]["choice"]


def solve(autopcg, m, plan_path, max_iter):
    cmd = [autopcg, "solve", m, "--device", "gpu", "--plan", plan_path, "--json",
           "--max-iter", str(max_iter)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):
        note(p.stderr[-2000:])
        raise RuntimeError(f"solve exited {p.returncode}")
    s = json.loads(p.stdout)
    return 1e3 * s["solve_ms"] / max(1, s["iterations"]), s["iterations"]


def rejected_launch(dots):
    """The fused launch a `dots` explanation names among its options, as plan.json's
    `fused_dots`; None when there is none."""
    for o in dots.get("options", []):
        m = re.search(r"dot3_next\S* t(\d+) b(\d+) ", o.get("name") or "")
        if m:
            return {"threads": int(m.group(1)), "blocks": int(m.group(2))}
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--autopcg", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--precond", default="none,jacobi")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=2000)
    ap.add_argument("--out-dir", default="/tmp/fused_ab")
    ap.add_argument("--json")
    ap.add_argument("matrices", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    rows = []
    for spec in a.matrices:
        m = make_matrix(spec, a.autopcg, a.out_dir)
        for pre in a.precond.split(","):
            d = os.path.join(a.out_dir, f"{os.path.basename(m)}.{pre}")
            cmd = [a.autopcg, "generate", m, "--model", a.model, "--precond", pre, "--out", d]
            note("$ " + " ".join(cmd))
            subprocess.run(cmd, check=True, capture_output=True)
            plan = json.load(open(os.path.join(d, "plan.json")))
            choice = gpu_choice(plan)
            fused_cfg = choice.get("fused_dots")
            model_fused = fused_cfg is not None
            dots = next((e for e in plan.get("explain", []) if e.get("step") == "dots"), {})
            fused = copy.deepcopy(plan)
            apart = copy.deepcopy(plan)
            gpu_choice(apart).pop("fused_dots", None)
            if not model_fused:
                fused_cfg = rejected_launch(dots)
                if fused_cfg is not None:
                    gpu_choice(fused)["fused_dots"] = fused_cfg
            paths = {}
            for name, p in (("fused", fused), ("apart", apart)):
                paths[name] = os.path.join(d, f"plan-{name}.json")
                json.dump(p, open(paths[name], "w"))
            if fused_cfg is None:
                paths.pop("fused")
            t = {k: [] for k in paths}
            its = {}
            for _ in range(a.rounds):
                for k, p in paths.items():
                    us, n_it = solve(a.autopcg, m, p, a.max_iter)
                    t[k].append(us)
                    its[k] = n_it
            med = {k: statistics.median(v) for k, v in t.items()}
            opts = dots.get("options", [])
            row = {"matrix": spec, "precond": pre, "model": "fused" if model_fused else "apart",
                   "fused_dots": fused_cfg, "us_fused": med.get("fused"),
                   "us_apart": med["apart"], "iterations": its,
                   "dots_options": [(o.get("name"), o.get("predicted_ms")) for o in opts],
                   "why": dots.get("why")}
            rows.append(row)
            note(json.dumps(row))
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    print(f"{'matrix':<28} {'pre':<7} {'model':<6} {'fused us/it':>11} {'apart us/it':>11} "
          f"{'ratio':>6}  predicted (ms)")
    for r in rows:
        uf, ua = r["us_fused"], r["us_apart"]
        pred = ", ".join(f"{n.split(' ')[0]} {p:.4f}" for n, p in r["dots_options"] if p is not None)
        fused_s = f"{uf:11.1f}" if uf else " " * 10 + "-"
        ratio_s = f"{uf / ua:6.3f}" if uf else " " * 5 + "-"
        print(f"{r['matrix']:<28} {r['precond']:<7} {r['model']:<6} {fused_s} {ua:>11.1f} "
              f"{ratio_s}  {pred}")

if __name__ == "__main__":
    main()
