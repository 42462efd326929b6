#!/usr/bin/env bash
# One call on a GPU host: SSOR-AI's two application forms against each other, per matrix, as
# `autopcg bench pcg` times the iteration (the solver's own backend, 16-iteration graphs
# replayed; each operand's kernel chosen by the model), and the form the model picks for that
# matrix (`autopcg generate`'s plan, made without the GPU). Microseconds per iteration,
# medians of REPEAT rounds, the two forms alternating within each round. The last line says on
# how many matrices the model's form is the faster one.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/ssor_forms.sh OUTDIR
# Environment:
#     MODEL   model file (default: models/nvidia-h100.json on an H100, else
#             models/nvidia-h200.json)
#     MATS    matrices, names of bench_matrices.sh (default "1138_bus bcsstk13 s3rmt3m3 p3d40
#             p3d50 p3d56 p3d64 p3d80 p3d100 p2d300 p2d512 p2d1000 fem1e5 fem4e5 fem2m k1138")
#     REPEAT  (default 3)   AUTOPCG the binary to run (default .gpu-bundle/bin/autopcg)
set -uo pipefail
out=${1:?usage: tools/ssor_forms.sh OUTDIR}
mkdir -p "$out/json" "$out/plans"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${AUTOPCG:-.gpu-bundle/bin/autopcg}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in
  *H100*) MODEL=${MODEL:-models/nvidia-h100.json} ;;
  *) MODEL=${MODEL:-models/nvidia-h200.json} ;;
esac
MATS=${MATS:-"1138_bus bcsstk13 s3rmt3m3 p3d40 p3d50 p3d56 p3d64 p3d80 p3d100 p2d300 p2d512 p2d1000 fem1e5 fem4e5 fem2m k1138"}
REPEAT=${REPEAT:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/bench_matrices.sh"
echo "device: $gpu; model: $MODEL; $(date -u +%FT%TZ)" | tee "$out/info.txt"
for name in $MATS; do
  m=$(gen "$name") || continue
  $B generate "$m" --model "$MODEL" --precond ssor-ai --out "$tmp/plan_$name" > /dev/null 2>&1 \
    && cp "$tmp/plan_$name/plan.json" "$out/plans/$name.json"
done
for r in $(seq 1 "$REPEAT"); do
  for name in $MATS; do
    m=$(gen "$name") || continue
    for f in factored explicit; do
      timeout 120 $B bench pcg "$m" --precond ssor-ai --ssor-form "$f" --model "$MODEL" --json \
        > "$out/json/$name.$f.$r.json" 2> "$out/json/$name.$f.$r.err"
    done
  done
done
python3 - "$out" "$MATS" <<'PY' | tee "$out/table.txt"
import glob, json, os, statistics as st, sys
d, mats = sys.argv[1], sys.argv[2].split()
def us(name, form):
    v = []
    for f in glob.glob(os.path.join(d, 'json', f'{name}.{form}.*.json')):
        try:
            t = json.load(open(f))['times_ms']
        except Exception:
            continue
        t = t.get('iteration_graph_batch') or t['iteration_graph']
        v.append(t['median_ms'] * 1e3)
    return st.median(v) if v else None
print(f"{'matrix':9} {'rows':>9} {'nnz(A)':>10} {'factored':>9} {'explicit':>9} {'e/f':>6} "
      f"{'faster':>9} {'model':>9} {'predicted f / e us':>19}")
right = cases = 0
lost = []
for name in mats:
    f, e = us(name, 'factored'), us(name, 'explicit')
    try:
        p = json.load(open(os.path.join(d, 'plans', f'{name}.json')))
    except Exception:
        p = None
    if f is None or e is None or p is None:
        print(f"{name:9} (missing: see {d}/json/{name}.*.err)")
        continue
    model = p['precond']['form']
    cmp = [x for x in p.get('explain', []) if x['step'] == 'ssor-ai form']
    pred = '-'
    if cmp:
        o = {x['name'].split(':')[0]: x['score_ms'] * 1e3 for x in cmp[0]['options']}
        pred = f"{o.get('factored', float('nan')):.2f} / {o.get('explicit', float('nan')):.2f}"
    else:
        pred = 'not compared'
    faster = 'explicit' if e < f else 'factored'
    cases += 1
    if model == faster:
        right += 1
    else:
        lost.append((name, (max(e, f) / min(e, f) - 1) * 100))
    print(f"{name:9} {p['matrix']['n']:9d} {p['matrix']['nnz']:10d} {f:9.2f} {e:9.2f} {e / f:6.3f} "
          f"{faster:>9} {model:>9} {pred:>19}")
print(f"the model's form is the faster one on {right} of {cases} matrices"
      + ("; where not, it is slower by " + ', '.join(f"{n} {p:.1f}%" for n, p in lost) if lost else ''))
PY
