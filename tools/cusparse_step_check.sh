#!/usr/bin/env bash
# One call on a GPU host: what running SpMV steps by cuSPARSE costs and gains end to end. For
# each MATRIX:PRECOND, `autopcg generate` writes the model's plan; a copy of it has the SpMV
# steps handed to cuSPARSE (A without a preconditioner, K and K^T with factored SSOR-AI, M with
# explicit SSOR-AI); `autopcg solve --plan` runs both plans in turn, REPEAT times. The table
# gives medians: setup and its conversion part (for cuSPARSE: handle, descriptors,
# preprocessing and the first product), solve, ms per iteration, setup + solve.
#
# Usage, from the repository root after ../shared/tools/gpu-bundle (no Rust needed here):
#     tools/cusparse_step_check.sh OUTDIR MATRIX.mtx:PRECOND [...]
# Environment: ALG (default cusparse_spmv_csr_alg1), REPEAT (default 3), MODEL (default
# models/nvidia-h200.json), AUTOPCG_BIN (default .gpu-bundle/bin/autopcg).
set -euo pipefail
out=${1:?usage: tools/cusparse_step_check.sh OUTDIR MATRIX.mtx:PRECOND [...]}
shift
[[ $# -gt 0 ]] || { echo "cusparse_step_check: name at least one MATRIX.mtx:PRECOND" >&2; exit 2; }
mkdir -p "$out"
B=${AUTOPCG_BIN:-.gpu-bundle/bin/autopcg}
ALG=${ALG:-cusparse_spmv_csr_alg1}
REPEAT=${REPEAT:-3}
MODEL=${MODEL:-models/nvidia-h200.json}
[[ -x $B ]] || { echo "cusparse_step_check: $B not found (run ../shared/tools/gpu-bundle first)" >&2; exit 2; }
: > "$out/runs.jsonl"
for spec in "$@"; do
  m=${spec%:*}; p=${spec##*:}
  name=$(basename "$m"); name=${name%.gz}; name=${name%.mtx}
  g="$out/$name.$p"
  rm -rf "$g"
  "$B" generate "$m" --precond "$p" --model "$MODEL" --out "$g" > "$out/$name.$p.generate.log" 2>&1
  python3 - "$g/plan.json" "$ALG" <<'PY'
import json, sys
path, alg = sys.argv[1], sys.argv[2]
plan = json.load(open(path))
cu = {"Cusparse": {"alg": alg}}
for block in plan["blocks"]:
    c = block["choice"]
    pre = c["precond"]
    if isinstance(pre, dict) and "Factored" in pre:
        pre["Factored"]["k"]["method"] = cu
        pre["Factored"]["kt"]["method"] = cu
    elif isinstance(pre, dict) and "Explicit" in pre:
        pre["Explicit"]["m"]["method"] = cu
    else:
        c["a"]["method"] = cu
json.dump(plan, open(path.replace("plan.json", "plan_cusparse.json"), "w"), indent=1)
PY
  for r in $(seq "$REPEAT"); do
    for v in plan plan_cusparse; do
      if j=$("$B" solve "$m" --device gpu --plan "$g/$v.json" --json 2>> "$out/solve.err"); then
        echo "{\"run\": \"$name $p $v\", \"out\": $j}" >> "$out/runs.jsonl"
      else
        echo "cusparse_step_check: solve $name $p $v failed (see $out/solve.err)" >&2
      fi
    done
  done
done
python3 - "$out/runs.jsonl" <<'PY' | tee "$out/table.txt"
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows.setdefault(d["run"], []).append(d["out"])
print(f"{'run':34} {'iters':>5} {'setup':>8} {'convert':>8} {'solve':>8} {'ms/it':>8} {'total':>8}  SpMV steps")
for run, js in rows.items():
    med = lambda f: st.median(f(x) for x in js)
    steps = [s["kernel"] for s in js[0]["plan"]["steps"] if "spmv" in s["step"] or "precond" in s["step"]]
    print(f"{run:34} {js[0]['iterations']:>5} {med(lambda x: x['setup_ms']):8.1f} "
          f"{med(lambda x: x['setup'].get('convert_ms', float('nan'))):8.1f} "
          f"{med(lambda x: x['solve_ms']):8.2f} {med(lambda x: x['ms_per_iteration']):8.4f} "
          f"{med(lambda x: x['setup_ms'] + x['solve_ms']):8.1f}  {' '.join(steps)}"
          f"{'' if all(x['converged'] for x in js) else '  NOT CONVERGED'}")
PY
