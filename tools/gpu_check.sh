#!/usr/bin/env bash
# One call on a GPU host: the GPU test suite, then the figures of the first GPU baseline
# (docs/performance.md): SpMV tables (every kernel and cuSPARSE), PCG solves and per-step
# times, and the peers (cuSPARSE SpMV and cg through CuPy) on the same matrices.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/gpu_check.sh [OUTDIR]        (logs and JSON into OUTDIR, default ./gpu-check-out)
# Environment: SKIP_TESTS=1 skips the test suite; N3D (default 192) sets the 3D Poisson size.
set -uo pipefail
out=${1:-gpu-check-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=.gpu-bundle/bin/autopcg
n3d=${N3D:-192}
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$out/nvidia-smi.txt"
date -u +"%Y-%m-%d %H:%M UTC" > "$out/date.txt"

if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  .gpu-bundle/run-tests > "$out/tests.log" 2>&1
  echo "tests: $(tail -n 1 "$out/tests.log")"
  grep -E "^test .*FAILED|panicked at" "$out/tests.log" | head -n 20
fi

# Peers side by side (each also runs autopcg bench spmv and solve --precond none on the matrix).
timeout 300 python3 tools/peers.py --gen "poisson3d:$n3d" --autopcg "$B" --keep-mtx "$tmp/p3d.mtx" \
  --json "$out/peers_p3d.json" > "$out/peers_p3d.txt" 2>&1 || echo "peers p3d failed: $(tail -n 3 "$out/peers_p3d.txt")"
for m in s3rmt3m3 bcsstk13; do
  timeout 120 python3 tools/peers.py "matrices/$m.mtx" --autopcg "$B" \
    --json "$out/peers_$m.json" > "$out/peers_$m.txt" 2>&1 || echo "peers $m failed: $(tail -n 3 "$out/peers_$m.txt")"
done

$B matgen fem2d --n 2000000 --seed 3 --out "$tmp/fem.mtx" 2>> "$out/matgen.log"
timeout 240 $B bench spmv "$tmp/fem.mtx" --json > "$out/spmv_fem.json" 2> "$out/spmv_fem.err" \
  || echo "bench spmv fem failed: $(tail -n 3 "$out/spmv_fem.err")"
for m in p3d fem; do
  for p in none jacobi ssor-ai; do
    timeout 120 $B solve "$tmp/$m.mtx" --device gpu --precond "$p" --json > "$out/solve_${m}_$p.json" 2> "$out/solve_${m}_$p.err" \
      || echo "solve $m $p: exit $? $(tail -n 2 "$out/solve_${m}_$p.err")"
  done
done
for m in s3rmt3m3 bcsstk13; do
  for p in jacobi ssor-ai; do
    timeout 120 $B solve "matrices/$m.mtx" --device gpu --precond "$p" --json > "$out/solve_${m}_$p.json" 2> "$out/solve_${m}_$p.err" \
      || echo "solve $m $p: exit $? $(tail -n 2 "$out/solve_${m}_$p.err")"
  done
done
for m in "$tmp/p3d.mtx" matrices/s3rmt3m3.mtx matrices/bcsstk13.mtx; do
  name=$(basename "$m" .mtx)
  for p in none jacobi; do
    timeout 60 $B bench pcg "$m" --precond "$p" --json > "$out/pcg_${name}_$p.json" 2> "$out/pcg_${name}_$p.err" \
      || echo "bench pcg $name $p failed: $(tail -n 2 "$out/pcg_${name}_$p.err")"
  done
done
python3 tools/gpu_check_summary.py "$out"
rm -rf "$tmp"
