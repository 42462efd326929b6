#!/usr/bin/env bash
# One call on a GPU host: the solver `autopcg generate` emits, built with CMake and nvcc, against
# `autopcg solve --plan` on the same plan: iterations and ms per iteration both ways.
#
# Usage, from the repository root after ../shared/tools/gpu-bundle (no Rust needed here):
#     tools/generated_check.sh OUTDIR [MATRIX.mtx ...]
# Without matrices: 3D Poisson 128^3, a 2D P1 FEM matrix of 1e6 rows (both generated), and the
# SuiteSparse fixtures s3rmt3m3 and bcsstk13.
# Environment: PRECONDS (default "ssor-ai"), REPEAT (runs per side, the median is taken;
# default 3), AUTOPCG_BIN (default .gpu-bundle/bin/autopcg), NVCC (default: nvcc on the PATH,
# else /usr/local/cuda/bin/nvcc), MODEL (a model file for generate; default: the GPU's, found as
# solve finds it).
# Every command's output goes to OUTDIR/logs/; the table is printed last and written to
# OUTDIR/table.txt. Targets: iterations within 2%, time per iteration within 5%.
set -euo pipefail

out=${1:?usage: tools/generated_check.sh OUTDIR [MATRIX.mtx ...]}
shift
mkdir -p "$out/logs" "$out/gen" "$out/matrices"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${AUTOPCG_BIN:-.gpu-bundle/bin/autopcg}
REPEAT=${REPEAT:-3}
PRECONDS=${PRECONDS:-ssor-ai}
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
    dir="$out/gen/$tag"
    log="$out/logs/$tag"
    echo "== $tag" >&2
    if ! $B generate "$m" --precond "$p" --out "$dir" ${model_args[@]+"${model_args[@]}"} \
         > "$log.generate.log" 2>&1; then
      echo "   generate failed: $log.generate.log" >&2; status=1; continue
    fi
    if ! cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_COMPILER="$NVCC" > "$log.cmake.log" 2>&1 \
       || ! cmake --build "$dir/build" -j > "$log.build.log" 2>&1; then
      echo "   build failed: $log.cmake.log $log.build.log" >&2; status=1; continue
    fi
    for r in $(seq 1 "$REPEAT"); do
      "$dir/build/autopcg_gen_solve" "$m" --json > "$log.gen.$r.json" 2> "$log.gen.$r.err" || true
      $B solve "$m" --plan "$dir/plan.json" --json > "$log.solve.$r.json" 2> "$log.solve.$r.err" || true
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
      f"{'ms/it gen':>10} {'ms/it plan':>10} {'ratio':>7}  {'reason':<10} ok")
worst = 0
for tag in tags:
    runs = {}
    for side in ("gen", "solve"):
        js = [load(os.path.join(out, "logs", f"{tag}.{side}.{r}.json")) for r in range(1, repeat + 1)]
        runs[side] = [j for j in js if j]
    g, s = runs["gen"], runs["solve"]
    if not g or not s:
        print(f"{tag:<28} missing output: see {out}/logs/{tag}.*.err")
        worst = 1
        continue
    ig, is_ = g[0]["iterations"], s[0]["iterations"]
    mg = statistics.median(j["ms_per_iteration"] for j in g)
    ms = statistics.median(j["ms_per_iteration"] for j in s)
    di = abs(ig - is_) / max(is_, 1)
    ratio = mg / ms if ms > 0 else float("nan")
    ok = di <= 0.02 and abs(ratio - 1) <= 0.05
    worst |= not ok
    print(f"{tag:<28} {ig:>9} {is_:>10} {100*di:>7.2f}% {mg:>10.4f} {ms:>10.4f} {ratio:>7.3f}  "
          f"{g[0].get('reason', '?'):<10} {'yes' if ok else 'NO'}")
print("targets: iterations within 2%, ms per iteration within 5% (median of the runs each way)")
sys.exit(1 if worst else 0)
PY
cat "$out/table.txt"
exit $(( status | table ))
