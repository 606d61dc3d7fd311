#!/usr/bin/env bash
# N consecutive runs of the whole suite as CI runs it (issue 49's done-when):
# each a fresh clone of this repository's HEAD (as it stands when the run
# starts) and `make test` in it, its venv created and timed with it.
#   tools/suite_loop.sh [N=10] [OUT=/tmp/suite-loop]
# One line per run in OUT/summary.txt: exit code, wall seconds, pytest's last line.
set -u
N=${1:-10}
OUT=${2:-/tmp/suite-loop}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
    rm -rf "$OUT/clone"
    git clone -q "$REPO" "$OUT/clone"
    sha=$(git -C "$OUT/clone" rev-parse --short HEAD)
    start=$(date +%s)
    (cd "$OUT/clone" && make test > "$OUT/log$i.txt" 2>&1)
    rc=$?
    printf '%s run %d at %s: rc=%d wall=%ds | %s\n' "$(date +%H:%M:%S)" "$i" "$sha" "$rc" \
        "$(( $(date +%s) - start ))" "$(grep -E 'passed|failed' "$OUT/log$i.txt" | tail -1)" \
        >> "$OUT/summary.txt"
done
