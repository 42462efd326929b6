#!/usr/bin/env python3
"""ab_solve.py: two autopcg binaries side by side, end to end, as a user runs them (GPU host).

Each round runs `autopcg solve M --device gpu --precond P --json` once with each binary (in
alternating order from round to round, so that neither always runs on a warmer machine), one
process per solve. It prints, per matrix and preconditioner, the medians over the rounds of
the setup and its parts as `solve --json` reports them (device wait, preconditioner build,
selection, backend = uploads, conversions and kernel loading; the upload ahead, which
overlaps the selection, and the kernel loading alone), the solve, the time to solution
(setup + solve; reading the file is not counted) and the iterations, for A and B and B / A.

    python3 tools/ab_solve.py --a OLD/autopcg --b NEW/autopcg --rounds 3 \\
        --precond ssor-ai --precond none M1.mtx M2.mtx

Extra `solve` arguments go after `--` (e.g. `-- --model none`). One small solve per binary
first fills the kernel cache. --json FILE writes every run. Progress goes to stderr; the table
is printed last.
"""

import argparse
import json
import statistics
import subprocess
import sys


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def solve(binary, matrix, precond, extra, timeout):
    cmd = [binary, "solve", matrix, "--device", "gpu", "--precond", precond, "--json"] + extra
    note("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode not in (0, 1):
        note(p.stderr[-2000:])
        raise RuntimeError(f"{binary} exited {p.returncode} on {matrix}")
    return json.loads(p.stdout)


def parts(j):
    s = j["setup"]
    return {
        "setup": j["setup_ms"],
        "dev": s["device_ms"],
        "prec": s["precond_ms"],
        "select": s["select_ms"],
        "backend": s["backend_ms"],
        "ahead": s.get("ahead_ms", 0.0),
        "load": s.get("load_ms", 0.0),
        "solve": j["solve_ms"],
        "tts": j["setup_ms"] + j["solve_ms"],
        "iters": j["iterations"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the first binary (the baseline)")
    ap.add_argument("--b", required=True, help="the second binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precond", action="append", help="repeatable (default ssor-ai)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("matrices", nargs="+")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = ap.parse_args(argv[:cut]), argv[cut + 1 :]
    preconds = args.precond or ["ssor-ai"]
    # The warm-up's own iteration limit replaces any the extra arguments set.
    warm, i = [], 0
    while i < len(extra):
        if extra[i] == "--max-iter":
            i += 2
            continue
        warm.append(extra[i])
        i += 1
    for b in (args.a, args.b):
        solve(b, args.matrices[0], preconds[0], warm + ["--max-iter", "5"], args.timeout)
    runs = []
    for r in range(args.rounds):
        order = [("A", args.a), ("B", args.b)]
        if r % 2:
            order.reverse()
        for m in args.matrices:
            for p in preconds:
                for label, b in order:
                    j = solve(b, m, p, extra, args.timeout)
                    runs.append({"round": r, "side": label, "matrix": m, "precond": p, **parts(j)})
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump(runs, f, indent=1)
    keys = ["setup", "dev", "prec", "select", "backend", "ahead", "load", "solve", "tts", "iters"]
    print(f"medians of {args.rounds} rounds, ms (A = {args.a}, B = {args.b})")
    print(f"{'matrix':28} {'precond':9} {'side':4} " + " ".join(f"{k:>8}" for k in keys))
    for m in args.matrices:
        for p in preconds:
            med = {}
            for side in ("A", "B"):
                rs = [x for x in runs if x["matrix"] == m and x["precond"] == p and x["side"] == side]
                med[side] = {k: statistics.median(x[k] for x in rs) for k in keys}
                name = m.rsplit("/", 1)[-1][:28]
                print(f"{name:28} {p:9} {side:4} " + " ".join(f"{med[side][k]:8.1f}" for k in keys))
            ratio = {k: (med["B"][k] / med["A"][k] if med["A"][k] else float("nan")) for k in keys}
            print(f"{'':28} {'':9} {'B/A':4} " + " ".join(f"{ratio[k]:8.3f}" for k in keys))


if __name__ == "__main__":
    main()
