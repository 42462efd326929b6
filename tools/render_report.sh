#!/usr/bin/env bash
# Builds `autopcg report` from a committed model (its profiles beside it are found by name) and
# renders the page with headless Chromium to a PNG, to look at the report without a browser.
#
#   tools/render_report.sh [MODEL] [PNG]
#     MODEL  default models/nvidia-h200.json
#     PNG    default target/report/<model stem>.png; the page itself is
#            target/report/<model stem>.html
#
# Environment: MATRICES (default "matrices/bcsstk13.mtx"), WIDTH (default 1500), HEIGHT (of the
# screenshot, default 2400; the top of the page), CHROMIUM (default chromium).
#
# Needs Chromium: on Debian or Ubuntu, `apt-get install -y chromium`.
set -euo pipefail

cd "$(dirname "$0")/.."
model=${1:-models/nvidia-h200.json}
stem=$(basename "$model" .json)
html=target/report/$stem.html
png=${2:-target/report/$stem.png}
width=${WIDTH:-1500}
height=${HEIGHT:-2400}
chromium=${CHROMIUM:-chromium}
read -r -a matrices <<< "${MATRICES:-matrices/bcsstk13.mtx}"

if ! command -v "$chromium" > /dev/null; then
    echo "render_report.sh: $chromium not found; install it with: apt-get install -y chromium" >&2
    exit 2
fi

mkdir -p target/report "$(dirname "$png")"
cargo build --release -q -p autopcg-cli
args=()
for m in "${matrices[@]}"; do
    args+=(--matrix "$m")
done
./target/release/autopcg report --model "$model" "${args[@]}" --out "$html"

# Chromium wants an absolute file address and a profile folder it may write to.
abs_html=$(realpath "$html")
abs_png=$(realpath -m "$png")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$profile" --window-size="$width,$height" \
    --screenshot="$abs_png" "file://$abs_html" 2> /dev/null
echo "wrote $html and $png (${width}x${height}, the top of the page)"
