#!/usr/bin/env bash
# One call on a GPU host: the PCG iteration of the plan a model chooses against the fixed rule
# (`--model none`), per matrix and preconditioner, as `autopcg bench pcg` times it (the
# solver's own backend, 16-iteration graphs replayed). Microseconds per iteration, medians of
# REPEAT rounds, the plans alternating within each round; the last column names A's product.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/pcg_model_vs_fixed.sh OUTDIR
# Environment:
#     MODELS  "label:model-file ..." to compare (default "model:auto fixed:none"); the last
#             label is the one the others are divided by
#     MATS    matrices (default "1138_bus bcsstk13 s3rmt3m3 p2d100 p3d40 fem1e5 p3d64 fem4e5")
#     PRECONDS  (default "jacobi none ssor-ai")   REPEAT (default 3)
#     AUTOPCG the binary to run (default .gpu-bundle/bin/autopcg)
set -uo pipefail
out=${1:?usage: tools/pcg_model_vs_fixed.sh OUTDIR}
mkdir -p "$out/json"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${AUTOPCG:-.gpu-bundle/bin/autopcg}
MODELS=${MODELS:-"model:auto fixed:none"}
MATS=${MATS:-"1138_bus bcsstk13 s3rmt3m3 p2d100 p3d40 fem1e5 p3d64 fem4e5"}
PRECONDS=${PRECONDS:-"jacobi none ssor-ai"}
REPEAT=${REPEAT:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/bench_matrices.sh"
one() { timeout 120 $B bench pcg "$1" --precond "$2" --model "$3" --json; }
rounds one
python3 - "$out/json" "$MODELS" "$MATS" "$PRECONDS" <<'PY'
import json, glob, os, sys, statistics as st
d, models, mats, preconds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
labels = [m.split(':', 1)[0] for m in models]
rows = {}
for f in glob.glob(os.path.join(d, '*.json')):
    name, p, label, r, _ = os.path.basename(f).rsplit('.', 4)
    try:
        j = json.load(open(f))
    except Exception:
        continue
    t = j['times_ms'].get('iteration_graph_batch') or j['times_ms']['iteration_graph']
    rows.setdefault((name, p), {}).setdefault(label, []).append((t['median_ms'] * 1e3, j))
base = labels[-1]
print(f"{'matrix':9} {'precond':8} " + ' '.join(f"{l + ' us/it':>13}" for l in labels)
      + ' ' + ' '.join(f"{l + '/' + base:>13}" for l in labels[:-1]) + "  A's product (" + labels[0] + ')')
slower = cases = 0
for name in mats:
    for p in preconds:
        byl = rows.get((name, p))
        if not byl:
            continue
        med = {l: st.median(v for v, _ in byl[l]) for l in labels if byl.get(l)}
        cells = ' '.join(f"{med[l]:13.2f}" if l in med else f"{'-':>13}" for l in labels)
        ratios = ' '.join(f"{med[l] / med[base]:13.3f}" if l in med and base in med else f"{'-':>13}"
                          for l in labels[:-1])
        a = '-'
        if byl.get(labels[0]):
            steps = byl[labels[0]][0][1]['plan']['steps']
            spmv = [s for s in steps if s['step'] == 'spmv']
            dots = [s for s in steps if s['step'] == 'dots']
            if spmv:
                s = spmv[0]
                fused = ', dots fused' if dots and 'epilogue' in dots[0]['kernel'] else ''
                a = f"{s['format']} {s['kernel']} {s['config']}{fused}"
        if labels[0] in med and base in med:
            cases += 1
            slower += med[labels[0]] > med[base]
        print(f"{name:9} {p:8} {cells} {ratios}  {a}")
print(f"{labels[0]} slower than {base} on {slower} of {cases} cases")
PY
