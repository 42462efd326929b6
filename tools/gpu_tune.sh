#!/usr/bin/env bash
# One call on a GPU host: tune this GPU (models/<gpu>.json and its profile), optionally a second
# tune for the run-to-run stability figure, and the held-out evaluation of the model.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/gpu_tune.sh OUTDIR [steps...]
# Steps (default: tests tune eval): tests (GPU test suite), quick (a --quick tune, timed),
# tune (the full tune into models/), stability (a second full tune into OUTDIR, compared with
# the first), eval (eval-model on the held-out matrices), solve (model-chosen against default
# plans on a few matrices). Every step has a time limit; logs go to OUTDIR.
set -uo pipefail
out=${1:?usage: tools/gpu_tune.sh OUTDIR [steps...]}
shift
steps=${*:-tests tune eval}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export AUTOPCG_CACHE_DIR=${AUTOPCG_CACHE_DIR:-$out/kernel-cache}
B=.gpu-bundle/bin/autopcg
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" > "$out/date.txt"
gpu=$(head -n 1 "$out/gpu.txt" | cut -d, -f1)
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/ /g' | awk '{s=$1; for(i=2;i<=NF;i++){ if ($i ~ /^[0-9]+gb$/ || $i ~ /^(hbm|sxm|gddr)/ || $i=="pcie" || $i=="nvl") break; s=s"-"$i } print s}')
echo "gpu: $gpu ($slug)"
step() { # name limit command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf "%-10s rc=%-3s %5d s\n" "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$out/steps.txt"
  tail -n 4 "$out/$name.log" | sed 's/^/    /'
}
for s in $steps; do
  case $s in
    tests) step tests 240 .gpu-bundle/run-tests ;;
    quick) step quick 120 $B tune --quick --out "$out/quick/$slug-quick.json" ;;
    tune) step tune 420 $B tune ;;
    stability) step stability 420 $B tune --out "$out/second/$slug.json" \
                 && step stability-cmp 60 $B eval-model --stability "models/$slug.profile.jsonl" "$out/second/$slug.profile.jsonl" ;;
    eval) step eval 240 $B eval-model ;;
    solve)
      $B matgen poisson3d --n 128 --out "$out/p3d128.mtx" 2>/dev/null
      $B matgen powerlaw --n 1000000 --seed 9 --out "$out/pl.mtx" 2>/dev/null
      for m in "$out/p3d128.mtx" "$out/pl.mtx" matrices/s3rmt3m3.mtx; do
        b=$(basename "$m" .mtx)
        step "solve-$b-model" 120 $B solve "$m" --device gpu --explain
        step "solve-$b-default" 120 $B solve "$m" --device gpu --model none
      done
      step bench-pl 200 $B bench spmv "$out/pl.mtx"
      rm -f "$out"/*.mtx ;;
    *) echo "unknown step $s" ;;
  esac
done
rm -rf "$out/kernel-cache"
