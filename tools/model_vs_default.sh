#!/usr/bin/env bash
# One call on a GPU host: PCG solves with the plan the model chooses against the fixed rule
# (`--model none`) on generated and shipped matrices, ms per iteration side by side.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/model_vs_default.sh OUTDIR
set -uo pipefail
out=${1:?usage: tools/model_vs_default.sh OUTDIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=.gpu-bundle/bin/autopcg
tmp=$(mktemp -d)
$B matgen poisson3d --n 192 --out "$tmp/p3d192.mtx" 2>/dev/null
$B matgen fem2d --n 2000000 --seed 3 --out "$tmp/fem2m.mtx" 2>/dev/null
$B matgen powerlaw --n 1000000 --seed 9 --out "$tmp/pl1m.mtx" 2>/dev/null
for m in "$tmp/p3d192.mtx" "$tmp/fem2m.mtx" "$tmp/pl1m.mtx" matrices/s3rmt3m3.mtx matrices/bcsstk13.mtx; do
  name=$(basename "$m" .mtx)
  for p in none ssor-ai; do
    for mode in auto none; do
      timeout 120 $B solve "$m" --device gpu --precond "$p" --model "$mode" --json --explain \
        > "$out/${name}_${p}_model-${mode}.json" 2> "$out/${name}_${p}_model-${mode}.err"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, glob, os
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        j = json.load(open(f))
    except Exception:
        continue
    base = os.path.basename(f)[:-5]
    name, p, mode = base.rsplit("_", 2)
    rows.setdefault((name, p), {})[mode] = j
print(f"{'matrix':<12} {'precond':<8} {'iters':>6} {'model ms/it':>12} {'default ms/it':>14} {'speedup':>8}  applied (model)")
for (name, p), d in sorted(rows.items()):
    a, b = d.get("model-auto"), d.get("model-none")
    if not a or not b:
        print(f"{name:<12} {p:<8} missing"); continue
    ma, mb = a["ms_per_iteration"], b["ms_per_iteration"]
    print(f"{name:<12} {p:<8} {a['iterations']:>6} {ma:>12.4f} {mb:>14.4f} {mb/ma:>8.2f}  {a.get('precond_applied')}")
PY
rm -rf "$tmp"
