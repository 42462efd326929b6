#!/usr/bin/env python3
"""Hands every SpMV step of a saved plan (plan.json of `autopcg generate`) to cuSPARSE, in place:
A, and K and K^T (factored SSOR-AI) or M (explicit SSOR-AI). The step list is left as it was;
`autopcg generate --plan` and `autopcg solve --plan` read the steps' choices, and generate
rewrites the list from them.

Usage: tools/plan_to_cusparse.py PLAN.json [ALG]
ALG: cusparse_spmv_alg_default, cusparse_spmv_csr_alg1 (the default) or cusparse_spmv_csr_alg2.
"""
import json
import sys

ALGS = ("cusparse_spmv_alg_default", "cusparse_spmv_csr_alg1", "cusparse_spmv_csr_alg2")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path = sys.argv[1]
    alg = sys.argv[2] if len(sys.argv) == 3 else "cusparse_spmv_csr_alg1"
    if alg not in ALGS:
        sys.exit(f"plan_to_cusparse: unknown algorithm {alg!r} (one of {', '.join(ALGS)})")
    with open(path) as f:
        plan = json.load(f)
    cu = {"Cusparse": {"alg": alg}}
    handed = []
    for block in plan["blocks"]:
        choice = block["choice"]
        choice["a"]["method"] = cu
        handed.append("A")
        pre = choice["precond"]
        if isinstance(pre, dict) and "Factored" in pre:
            pre["Factored"]["k"]["method"] = cu
            pre["Factored"]["kt"]["method"] = cu
            handed += ["K", "K^T"]
        elif isinstance(pre, dict) and "Explicit" in pre:
            pre["Explicit"]["m"]["method"] = cu
            handed.append("M")
    with open(path, "w") as f:
        json.dump(plan, f, indent=1)
    print(f"{path}: {', '.join(handed)} handed to {alg}")


if __name__ == "__main__":
    main()
