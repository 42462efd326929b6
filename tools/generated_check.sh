#!/usr/bin/env bash
# One call on a GPU host: the solver `autopcg generate` emits, built with CMake and nvcc, against
# `autopcg solve --plan` on the same plan: iterations and ms per iteration both ways.
# Each side also solves to a loose tolerance, so that the time of one iteration is measured as
# the slope (solve_ms at tol 1e-8 - solve_ms at the loose tol) / (difference in iterations):
# the whole-solve average (solve_ms / iterations) also carries each driver's fixed costs (the
# start, graph capture, the final true residual, copying x back), which are reported apart.
#
# Usage, from the repository root after ../shared/tools/gpu-bundle (no Rust needed here):
#     tools/generated_check.sh OUTDIR [MATRIX.mtx ...]
# Without matrices: 3D Poisson 128^3, a 2D P1 FEM matrix of 1e6 rows (both generated), and the
# SuiteSparse fixtures s3rmt3m3 and bcsstk13.
# Environment: PRECONDS (default "ssor-ai"), REPEAT (runs per side, the median is taken;
# default 3), LOOSE_TOL (default 1e-4), AUTOPCG_BIN (default .gpu-bundle/bin/autopcg), NVCC (default: nvcc on the PATH,
# else /usr/local/cuda/bin/nvcc), MODEL (a model file for generate; default: the GPU's, found as
# solve finds it), PLAN_EDIT (a command run on each generated plan.json, which it edits in
# place, e.g. "python3 tools/plan_to_cusparse.py": the edited plan is then emitted again with
# `generate --plan`, and both sides run it), GPUS (default 1: with N > 1 the plan is generated
# with `--gpus N`, split into N row blocks, one per GPU, and both sides run it on GPUs 0..N;
# ANY_DEVICE=1 passes --any-device to the emitted command, which then runs the blocks on the
# GPUs there are).
# Every command's output goes to OUTDIR/logs/; the table is printed last and written to
# OUTDIR/table.txt. Targets: iterations within 2%, time per iteration (the slope) within 5%.
set -euo pipefail

out=${1:?usage: tools/generated_check.sh OUTDIR [MATRIX.mtx ...]}
shift
mkdir -p "$out/logs" "$out/gen" "$out/matrices"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${AUTOPCG_BIN:-.gpu-bundle/bin/autopcg}
REPEAT=${REPEAT:-3}
LOOSE_TOL=${LOOSE_TOL:-1e-4}
PRECONDS=${PRECONDS:-ssor-ai}
GPUS=${GPUS:-1}
gen_args=()
if [[ ${ANY_DEVICE:-0} == 1 ]]; then gen_args=(--any-device); fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
model_args=()
if [[ -n ${MODEL:-} ]]; then model_args=(--model "$MODEL"); fi

[[ -x $B ]] || { echo "generated_check: $B not found (run ../shared/tools/gpu-bundle first)" >&2; exit 2; }
[[ -x $NVCC ]] || { echo "generated_check: nvcc not found (set NVCC)" >&2; exit 2; }
command -v cmake >/dev/null || { echo "generated_check: cmake not found" >&2; exit 2; }

matrices=("$@")
if [[ ${#matrices[@]} -eq 0 ]]; then
  $B matgen poisson3d --n 128 --out "$out/matrices/poisson3d_128.mtx" > "$out/logs/matgen_p3d.log" 2>&1
  $B matgen fem2d --n 1000000 --seed 3 --out "$out/matrices/fem2d_1m.mtx" > "$out/logs/matgen_fem.log" 2>&1
  matrices=("$out/matrices/poisson3d_128.mtx" "$out/matrices/fem2d_1m.mtx" matrices/s3rmt3m3.mtx matrices/bcsstk13.mtx)
fi

status=0
for m in "${matrices[@]}"; do
  name=$(basename "$m"); name=${name%.gz}; name=${name%.mtx}
  for p in $PRECONDS; do
    tag="${name}_${p}"
    if [[ $GPUS != 1 ]]; then tag="${tag}_${GPUS}gpus"; fi
    dir="$out/gen/$tag"
    log="$out/logs/$tag"
    echo "== $tag" >&2
    if ! $B generate "$m" --precond "$p" --gpus "$GPUS" --out "$dir" ${model_args[@]+"${model_args[@]}"} \
         > "$log.generate.log" 2>&1; then
      echo "   generate failed: $log.generate.log" >&2; status=1; continue
    fi
    if [[ -n ${PLAN_EDIT:-} ]]; then
      if ! $PLAN_EDIT "$dir/plan.json" > "$log.edit.log" 2>&1 \
         || ! $B generate "$m" --plan "$dir/plan.json" --out "$dir" > "$log.regenerate.log" 2>&1; then
        echo "   plan edit or regeneration failed: $log.edit.log $log.regenerate.log" >&2
        status=1; continue
      fi
    fi
    if ! cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_COMPILER="$NVCC" > "$log.cmake.log" 2>&1 \
       || ! cmake --build "$dir/build" -j > "$log.build.log" 2>&1; then
      echo "   build failed: $log.cmake.log $log.build.log" >&2; status=1; continue
    fi
    for r in $(seq 1 "$REPEAT"); do
      "$dir/build/autopcg_gen_solve" "$m" ${gen_args[@]+"${gen_args[@]}"} --json > "$log.gen.$r.json" 2> "$log.gen.$r.err" || true
      $B solve "$m" --plan "$dir/plan.json" --json > "$log.solve.$r.json" 2> "$log.solve.$r.err" || true
      "$dir/build/autopcg_gen_solve" "$m" ${gen_args[@]+"${gen_args[@]}"} --tol "$LOOSE_TOL" --json > "$log.genloose.$r.json" 2> "$log.genloose.$r.err" || true
      $B solve "$m" --plan "$dir/plan.json" --tol "$LOOSE_TOL" --json > "$log.solveloose.$r.json" 2> "$log.solveloose.$r.err" || true
    done
  done
done

table=0
python3 - "$out" "$REPEAT" > "$out/table.txt" <<'PY' || table=1
import json, os, statistics, sys, glob
out, repeat = sys.argv[1], int(sys.argv[2])
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None
tags = sorted({os.path.basename(p).split(".gen.")[0] for p in glob.glob(os.path.join(out, "logs", "*.gen.*.json"))})
print(f"{'matrix / precond':<28} {'iters gen':>9} {'iters plan':>10} {'d iters':>8} "
      f"{'avg gen':>8} {'avg plan':>8} {'ratio':>6} {'slope gen':>9} {'slope plan':>10} {'ratio':>6} "
      f"{'fixed gen':>9} {'fixed plan':>10}  {'reason':<10} ok")
worst = 0
def med(runs, key):
    return statistics.median(j[key] for j in runs)
for tag in tags:
    runs = {}
    for side in ("gen", "solve", "genloose", "solveloose"):
        js = [load(os.path.join(out, "logs", f"{tag}.{side}.{r}.json")) for r in range(1, repeat + 1)]
        runs[side] = [j for j in js if j]
    if not all(runs.values()):
        print(f"{tag:<28} missing output: see {out}/logs/{tag}.*.err")
        worst = 1
        continue
    g, s = runs["gen"], runs["solve"]
    ig, is_ = g[0]["iterations"], s[0]["iterations"]
    di = abs(ig - is_) / max(is_, 1)
    avg_g, avg_s = med(g, "ms_per_iteration"), med(s, "ms_per_iteration")
    slope, fixed = {}, {}
    for side in ("gen", "solve"):
        tight, loose = runs[side], runs[side + "loose"]
        dit = tight[0]["iterations"] - loose[0]["iterations"]
        dms = med(tight, "solve_ms") - med(loose, "solve_ms")
        slope[side] = dms / dit if dit > 0 else float("nan")
        fixed[side] = med(tight, "solve_ms") - tight[0]["iterations"] * slope[side]
    ratio_avg = avg_g / avg_s if avg_s > 0 else float("nan")
    ratio = slope["gen"] / slope["solve"] if slope["solve"] > 0 else float("nan")
    ok = di <= 0.02 and abs(ratio - 1) <= 0.05
    worst |= not ok
    print(f"{tag:<28} {ig:>9} {is_:>10} {100*di:>7.2f}% {avg_g:>8.4f} {avg_s:>8.4f} {ratio_avg:>6.3f} "
          f"{slope['gen']:>9.4f} {slope['solve']:>10.4f} {ratio:>6.3f} {fixed['gen']:>9.2f} "
          f"{fixed['solve']:>10.2f}  {g[0].get('reason', '?'):<10} {'yes' if ok else 'NO'}")
print("ms per iteration: avg = solve_ms / iterations at tol 1e-8; slope = the difference of solve_ms "
      "at 1e-8 and at the loose tolerance over the difference in iterations; fixed = solve_ms at "
      "1e-8 - iterations x slope (ms). Median of the runs each way.")
print("targets: iterations within 2%, ms per iteration (slope) within 5%")
sys.exit(1 if worst else 0)
PY
cat "$out/table.txt"
exit $(( status | table ))
