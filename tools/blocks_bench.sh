#!/usr/bin/env bash
# One call on a GPU host: row blocks on one GPU (`autopcg solve M --device gpu --blocks N`)
# against the unsplit solve, for one or several autopcg binaries side by side (an A/B of two
# builds in one run). Prints per matrix, preconditioner and block count the iterations and
# the milliseconds per iteration (solve_ms / iterations, the median of REPEAT runs, the
# binaries alternating within each run), and the setup_ms; N = 0 is the unsplit solve.
# Usage, from the repository root after ../shared/tools/gpu-bundle:
#     tools/blocks_bench.sh OUTDIR
# Environment:
#     BINS      "label:path ..." (default "new:.gpu-bundle/bin/autopcg")
#     MATS      names of bench_matrices.sh (default "p3d128 fem1e6 s3rmt3m3")
#     PRECONDS  (default "jacobi ssor-ai")   BLOCKS (default "0 1 2 4")   REPEAT (default 3)
set -uo pipefail
out=${1:?usage: tools/blocks_bench.sh OUTDIR}
mkdir -p "$out/json"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BINS=${BINS:-"new:.gpu-bundle/bin/autopcg"}
MATS=${MATS:-"p3d128 fem1e6 s3rmt3m3"}
PRECONDS=${PRECONDS:-"jacobi ssor-ai"}
BLOCKS=${BLOCKS:-"0 1 2 4"}
REPEAT=${REPEAT:-3}
B=${BINS%% *}; B=${B#*:}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/bench_matrices.sh"
gen_more() {
  case $1 in
    p3d128) [ -f "$tmp/p3d128.mtx" ] || $B matgen poisson3d --n 128 --out "$tmp/p3d128.mtx" > /dev/null 2>&1; echo "$tmp/p3d128.mtx" ;;
    fem1e6) [ -f "$tmp/fem1e6.mtx" ] || $B matgen fem2d --n 1000000 --seed 3 --out "$tmp/fem1e6.mtx" > /dev/null 2>&1; echo "$tmp/fem1e6.mtx" ;;
    *) gen "$1" ;;
  esac
}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "device: $gpu; $(date -u +%FT%TZ); binaries: $BINS" | tee "$out/info.txt"
for r in $(seq 1 "$REPEAT"); do
  for name in $MATS; do
    m=$(gen_more "$name") || continue
    for p in $PRECONDS; do
      for nb in $BLOCKS; do
        for bb in $BINS; do
          label=${bb%%:*}; bin=${bb#*:}
          args=(solve "$m" --device gpu --precond "$p" --json)
          if [[ $nb != 0 ]]; then args+=(--blocks "$nb"); fi
          "$bin" "${args[@]}" > "$out/json/$name.$p.$nb.$label.$r.json" 2> "$out/json/$name.$p.$nb.$label.$r.err"
        done
      done
    done
  done
done
python3 - "$out" "$MATS" "$PRECONDS" "$BLOCKS" "$BINS" "$REPEAT" <<'PY' | tee "$out/table.txt"
import json, statistics, sys, os
out, mats, preconds, blocks, bins, repeat = sys.argv[1], *[a.split() for a in sys.argv[2:6]], int(sys.argv[6])
labels = [b.split(":", 1)[0] for b in bins]
def load(name, p, nb, label):
    its, ms, setup = [], [], []
    for r in range(1, repeat + 1):
        f = f"{out}/json/{name}.{p}.{nb}.{label}.{r}.json"
        try:
            s = json.load(open(f))
        except (OSError, ValueError):
            continue
        if s.get("iterations"):
            its.append(s["iterations"]); ms.append(s["solve_ms"] / s["iterations"]); setup.append(s["setup_ms"])
    if not ms:
        return None
    return its[0], statistics.median(ms), statistics.median(setup)
head = "| matrix | precond | blocks | " + " | ".join(f"iterations {l} | ms/it {l} | setup {l}" for l in labels)
if len(labels) > 1:
    head += " | " + " | ".join(f"{l}/{labels[0]}" for l in labels[1:])
print(head + " |")
print("|" + "---|" * (3 + 3 * len(labels) + max(0, len(labels) - 1)))
for name in mats:
    for p in preconds:
        for nb in blocks:
            rows = [load(name, p, nb, l) for l in labels]
            cells = []
            for x in rows:
                cells += ["-", "-", "-"] if x is None else [str(x[0]), f"{x[1]:.4f}", f"{x[2]:.1f}"]
            if len(labels) > 1:
                for x in rows[1:]:
                    cells.append("-" if x is None or rows[0] is None else f"{x[1] / rows[0][1]:.3f}")
            print(f"| {name} | {p} | {nb if nb != '0' else 'unsplit'} | " + " | ".join(cells) + " |")
PY
