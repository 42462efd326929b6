#!/usr/bin/env python3
"""e2e_bench.py: autopcg end to end against CuPy's cg, side by side in one run (GPU host).

For every matrix and preconditioner it prints, in one table:
  - autopcg's setup broken down as `autopcg solve --json` reports it (device, preconditioner,
    selection, backend = conversions and uploads, right-hand side), the solve, the time to
    solution (setup + solve, matrix already in host memory; reading the file is not counted),
    iterations, milliseconds per iteration and the true relative residual;
  - the iteration floor: the best SpMV of A measured by `autopcg bench spmv --quick` plus the
    vector passes of one iteration at the triad bandwidth that benchmark measures (none: 11
    passes, the update 9 and the dots 2 distinct vectors; jacobi: 15, the fused update 12 and the
    dots 3; ssor-ai: plus the best SpMV of each operand of the preconditioner the solve applied,
    measured the same way (`bench spmv --operand k` and `kt` for the factored form, `m` for
    the explicit one; `k2` and `kt2` for ssor-ai2 factored, whose explicit form has no floor
    here), and 13 passes: update 10, dots 3 (the diagonal scaling is folded into
    K^T's values, so it makes no pass of its own)). Where the plan adds the dots in
    the SpMV's epilogue (its dots step says so), the dots' passes are those the fused kernel
    still makes: none 0 (u is r and w is in registers), jacobi and ssor-ai 1 (r), so 9, 13 and
    11 passes;
  - CuPy's cupyx.scipy.sparse.linalg.cg with the same preconditioner (ssor-ai against CuPy with
    Jacobi, CuPy having no SSOR-AI): the matrix uploaded from SciPy, b uploaded, cg, x
    downloaded, timed after one untimed warm-up solve (CuPy's kernels compiled and its context
    up, which favours CuPy); iterations counted by a callback, true residual recomputed.

autopcg runs in a fresh process per solve, as a user runs it; one small solve first fills the
kernel cache so that compile time is not counted (module loading still is). `solve` starts
opening the GPU before it reads the matrix, so its setup counts only what is left of the open
once the matrix is read (`dev`); reading the file (`read`, shown apart) is not counted, as
CuPy's mmread is not. Matrices:
  gen:FAMILY:N        `autopcg matgen FAMILY --n N` (poisson3d, fem2d, ...)
  kron:FILE:G         `autopcg matgen --kron FILE --n G` (a real matrix times a G x G Poisson grid)
  FILE                a Matrix Market file

    python3 tools/e2e_bench.py --autopcg .gpu-bundle/bin/autopcg --out-dir $OUT/e2e \\
        gen:poisson3d:192 gen:fem2d:2000000 kron:matrices/1138_bus.mtx:40 \\
        kron:matrices/bcsstk13.mtx:12

--json FILE writes every number. Progress goes to stderr; the table is printed last.
"""

import argparse
import inspect
import json
import os
import subprocess
import sys
import time


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def run_json(cmd, timeout, ok=(0,)):
    """The JSON a command prints; `ok` lists the exit codes that still print it (solve: 1 is
    "ran but did not converge")."""
    note("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode not in ok:
        note(p.stderr[-2000:])
        raise RuntimeError(f"{cmd[1]} exited {p.returncode}")
    return json.loads(p.stdout)


def make_matrix(spec, autopcg, out_dir):
    """The .mtx path of a matrix spec (generated once into out_dir)."""
    if spec.startswith("gen:"):
        _, fam, n = spec.split(":")
        path = os.path.join(out_dir, f"{fam}_{n}.mtx")
        cmd = [autopcg, "matgen", fam, "--n", n, "--out", path]
    elif spec.startswith("kron:"):
        _, f, g = spec.split(":")
        stem = os.path.splitext(os.path.basename(f))[0]
        path = os.path.join(out_dir, f"{stem}_kron{g}.mtx")
        cmd = [autopcg, "matgen", "--kron", f, "--n", g, "--out", path]
    else:
        return spec
    if not os.path.exists(path):
        note("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True)
    return path


def fused_dots(plan):
    """True when the plan's dots step is the SpMV's epilogue (no reduction kernel)."""
    steps = (plan or {}).get("steps") or []
    return any(st.get("step") == "dots" and "epilogue" in str(st.get("kernel", ""))
               for st in steps)


def floor_ms(pre, n, spmv_ms, precond_spmv_ms, triad_gbs, fused=False):
    """The iteration floor (see the module text): the SpMV of A, the preconditioner's SpMVs
    (ssor-ai) and the vector passes at the triad bandwidth."""
    pass_ms = 8.0 * n / (triad_gbs * 1e9) * 1e3
    if pre == "none":
        return spmv_ms + (9 if fused else 11) * pass_ms
    if pre == "jacobi":
        return spmv_ms + (13 if fused else 15) * pass_ms
    return spmv_ms + precond_spmv_ms + (11 if fused else 13) * pass_ms


def precond_operands(applied, pre="ssor-ai"):
    """The `bench spmv --operand` values of the preconditioner a solve applied (`pre` the
    preconditioner asked: second order's factors are `k2` and `kt2`; its explicit product has
    no operand, so no floor)."""
    if pre == "ssor-ai2":
        return ["k2", "kt2"] if applied == "ssor-ai-factored" else None
    if applied == "ssor-ai-factored":
        return ["k", "kt"]
    if applied == "ssor-ai-explicit":
        return ["m"]
    return []


def spmv_floor_inputs(autopcg, path, timeout, quick, operand="a"):
    """The best SpMV of the matrix (or of the preconditioner's `operand`) and the triad
    bandwidth (measured by the full benchmark; `--quick` skips the triad, so its callers take
    the triad of an earlier full run)."""
    cmd = [autopcg, "bench", "spmv", path, "--json", "--operand", operand] + \
        (["--quick"] if quick else [])
    b = run_json(cmd, timeout)
    recs = b["records"]
    best = recs[b["best"]]
    cus = [r["median_ms"] for r in recs
           if "cusparse" in str(r.get("kernel", "")).lower() and r.get("median_ms")
           and r.get("status") == "Ok"]
    own = recs[b["best_own"]] if b.get("best_own") is not None else best
    return {
        "best_ms": best["median_ms"],
        "best_kernel": f'{best["format"]} {best["kernel"]} {best.get("threads")}',
        "best_own_ms": own["median_ms"],
        "cusparse_ms": min(cus, default=None),
        "triad_gbs": (b.get("triad") or {}).get("gbps"),
    }


def cupy_solve(cp, cpx, a_host, pre, tol, maxiter):
    """Time to solution with CuPy from a SciPy matrix in host memory."""
    import numpy as np
    from cupyx.scipy.sparse.linalg import cg, LinearOperator

    n = a_host.shape[0]
    b_host = a_host @ np.ones(n)

    def once(maxiter):
        t0 = time.perf_counter()
        a = cpx.csr_matrix(a_host)
        b = cp.asarray(b_host)
        m = None
        if pre != "none":
            dinv = 1.0 / a.diagonal()
            m = LinearOperator((n, n), matvec=lambda v: dinv * v, dtype=cp.float64)
        its = [0]

        def cb(_xk):
            its[0] += 1

        params = inspect.signature(cg).parameters
        kw = {"atol": 0.0} if "atol" in params else {}
        kw["rtol" if "rtol" in params else "tol"] = tol
        x, info = cg(a, b, maxiter=maxiter, M=m, callback=cb, **kw)
        x_host = cp.asnumpy(x)
        cp.cuda.Device().synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        res = np.linalg.norm(b_host - a_host @ x_host) / np.linalg.norm(b_host)
        return {"ms": ms, "iterations": its[0], "info": int(info), "true_residual": float(res)}

    once(5)  # warm-up: kernels compiled, memory pool filled
    return once(maxiter)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("matrices", nargs="+")
    p.add_argument("--autopcg", required=True, metavar="PATH")
    p.add_argument("--precond", default="none,jacobi,ssor-ai")
    p.add_argument("--tol", type=float, default=1e-8)
    p.add_argument("--max-iter", type=int, default=20000)
    p.add_argument("--out-dir", default="e2e")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--no-cupy", action="store_true")
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    pres = args.precond.split(",")
    cp = cpx = None
    if not args.no_cupy:
        import cupy as cp  # noqa: F811
        import cupyx.scipy.sparse as cpx  # noqa: F811
        import scipy.io
        import scipy.sparse
    # Fill the kernel cache once (compilation is a one-time cost per machine).
    warm = make_matrix("gen:poisson3d:16", args.autopcg, args.out_dir)
    for pre in pres:
        run_json([args.autopcg, "solve", warm, "--device", "gpu", "--precond", pre, "--json"],
                 args.timeout)
    rows = []
    triad = None  # GB/s, from the first matrix's full SpMV benchmark
    for spec in args.matrices:
        path = make_matrix(spec, args.autopcg, args.out_dir)
        fl = spmv_floor_inputs(args.autopcg, path, args.timeout, quick=triad is not None)
        triad = fl["triad_gbs"] = fl["triad_gbs"] or triad
        operand_floor = {}  # the preconditioner operands' SpMV benchmarks of this matrix
        a_host = None
        if cp is not None:
            t0 = time.perf_counter()
            a_host = scipy.sparse.csr_matrix(scipy.io.mmread(path))
            note(f"scipy read {path} in {time.perf_counter() - t0:.1f} s")
        for pre in pres:
            s = run_json([args.autopcg, "solve", path, "--device", "gpu", "--precond", pre,
                          "--tol", str(args.tol), "--max-iter", str(args.max_iter), "--json"],
                         args.timeout, ok=(0, 1))
            n, nnz = s["n"], s["nnz"]
            fused = fused_dots(s.get("plan"))
            applied = s.get("precond_applied")
            pfl = {}
            ops = precond_operands(applied, pre)
            for op in ops or []:
                if op not in operand_floor:
                    operand_floor[op] = spmv_floor_inputs(args.autopcg, path, args.timeout,
                                                          quick=True, operand=op)
                pfl[op] = operand_floor[op]
            p_ms = sum(f["best_ms"] for f in pfl.values())
            f_ms = (floor_ms(pre, n, fl["best_ms"], p_ms, fl["triad_gbs"], fused)
                    if ops is not None else None)
            row = {
                "matrix": spec, "n": n, "nnz": nnz, "precond": pre,
                "precond_applied": s.get("precond_applied"),
                "read_ms": s.get("read_ms"),
                "setup": s["setup"], "setup_ms": s["setup_ms"], "solve_ms": s["solve_ms"],
                "tts_ms": s["setup_ms"] + s["solve_ms"],
                "iterations": s["iterations"], "ms_per_it": s["ms_per_iteration"],
                "residual": s["relative_residual"], "converged": s["converged"],
                "floor_ms": f_ms, "fused_dots": fused, "spmv": fl, "precond_spmv": pfl,
                "plan": s.get("plan"),
            }
            if a_host is not None:
                c = cupy_solve(cp, cpx, a_host, pre, args.tol, args.max_iter)
                row["cupy"] = c
            rows.append(row)
            note(json.dumps({k: row[k] for k in ("matrix", "precond", "tts_ms", "iterations")}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    hdr = (f'{"matrix":<28} {"pre":<8} {"n":>9} {"read":>6} {"setup":>7} {"dev":>6} '
           f'{"prec":>6} {"sel":>6} {"back":>6} {"solve":>8} {"tts":>8} {"its":>6} {"us/it":>7} {"floor":>7} '
           f'{"x":>5} {"cupy":>8} {"c.its":>6} {"speedup":>7}')
    print(hdr)
    for r in rows:
        st = r["setup"]
        c = r.get("cupy") or {}
        fl = r["floor_ms"] * 1e3 if r["floor_ms"] is not None else float("nan")
        print(f'{r["matrix"][-28:]:<28} {r["precond"]:<8} {r["n"]:>9} '
              f'{r.get("read_ms") or float("nan"):>6.0f} {r["setup_ms"]:>7.1f} '
              f'{st.get("device_ms", 0):>6.1f} {st.get("precond_ms", 0):>6.1f} '
              f'{st.get("select_ms", 0):>6.1f} {st.get("backend_ms", 0):>6.1f} '
              f'{r["solve_ms"]:>8.1f} {r["tts_ms"]:>8.1f} {r["iterations"]:>5}{" " if r["converged"] else "*"} '
              f'{r["ms_per_it"] * 1e3:>7.1f} {fl:>7.1f} '
              f'{r["ms_per_it"] * 1e3 / fl:>5.2f} {c.get("ms", float("nan")):>8.1f} '
              f'{c.get("iterations", 0):>6} {c.get("ms", float("nan")) / r["tts_ms"]:>7.2f}')
    print("times in ms except us/it and floor (us per iteration); x = us/it over floor; "
          "speedup = CuPy time to solution / autopcg's (above 1: autopcg faster); "
          "* = not converged within --max-iter")


if __name__ == "__main__":
    main()
