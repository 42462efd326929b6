#!/usr/bin/env bash
# One call on a GPU host: PCG solves with the plan a model chooses against the fixed rule
# (`--model none`) on shipped and generated matrices from 1e3 to 8e6 rows, every
# preconditioner, ms per iteration side by side (medians of REPEAT rounds, the plans
# alternating within each round).
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/model_vs_default.sh OUTDIR
# Environment:
#     MODELS  "label:model-file ..." to compare (default "model:auto fixed:none"); a label's
#             column is its ms per iteration, the last label is the one the others are divided by
#     MATS    matrices to run (default: all of them, smallest first; names below)
#     PRECONDS  (default "none jacobi ssor-ai")   REPEAT (default 3)   MAX_ITER (default 3000)
#     AUTOPCG the binary to run (default .gpu-bundle/bin/autopcg)
set -uo pipefail
out=${1:?usage: tools/model_vs_default.sh OUTDIR}
mkdir -p "$out/json"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${AUTOPCG:-.gpu-bundle/bin/autopcg}
MODELS=${MODELS:-"model:auto fixed:none"}
MATS=${MATS:-"1138_bus bcsstk13 s3rmt3m3 p2d100 p3d40 fem1e5 p3d64 fem4e5 p3d192 fem2m pl1m"}
PRECONDS=${PRECONDS:-"none jacobi ssor-ai"}
REPEAT=${REPEAT:-3}
MAX_ITER=${MAX_ITER:-3000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/bench_matrices.sh"
one() {
  timeout 300 $B solve "$1" --device gpu --precond "$2" --model "$3" \
    --max-iter "$MAX_ITER" --json --explain
}
rounds one
python3 - "$out/json" "$MODELS" "$MATS" <<'PY'
import json, glob, os, sys, statistics as st
d, models, mats = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
labels = [m.split(':', 1)[0] for m in models]
rows = {}
for f in glob.glob(os.path.join(d, '*.json')):
    name, p, label, r, _ = os.path.basename(f).rsplit('.', 4)
    try:
        j = json.load(open(f))
    except Exception:
        continue
    rows.setdefault((name, p), {}).setdefault(label, []).append(j)
base = labels[-1]
print(f"{'matrix':9} {'precond':8} {'iterations':>18} " + ' '.join(f"{l + ' us/it':>13}" for l in labels)
      + ' ' + ' '.join(f"{l + '/' + base:>13}" for l in labels[:-1]) + '  SSOR-AI form')
order = {m: i for i, m in enumerate(mats)}
for (name, p), byl in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
    med = {l: st.median(x['ms_per_iteration'] for x in byl[l]) * 1e3 for l in labels if byl.get(l)}
    its = '/'.join(str(byl[l][0]['iterations']) if byl.get(l) else '-' for l in labels)
    form = '/'.join((byl[l][0].get('precond_applied') or '-').replace('ssor-ai-', '') if byl.get(l) else '-'
                    for l in labels) if p.startswith('ssor') else '-'
    cells = ' '.join(f"{med[l]:13.2f}" if l in med else f"{'-':>13}" for l in labels)
    ratios = ' '.join(f"{med[l] / med[base]:13.3f}" if l in med and base in med else f"{'-':>13}"
                      for l in labels[:-1])
    print(f"{name:9} {p:8} {its:>18} {cells} {ratios}  {form}")
PY
