#!/usr/bin/env bash
# GPU correctness tests in parallel lanes on one card (run from the repository root on the device
# machine, after the gpu-host pack is installed and sourced):
#
#   LIMIT=240 bash tools/gpu/lanes.sh "a.py,b.py" "c.py" "d.py,e.py"
#
# Each argument is a lane: its comma-separated pytest paths (each may carry options, e.g.
# "a.py --deselect a.py::test_x") run one after the other, each in its
# own process (a device-side assert poisons the CUDA context of the process that hit it) under
# LIMIT seconds; the lanes run at the same time (an H200 holds several test processes; timings
# are not measured here). Logs go to /tmp/lanes/, packed into $OUT/lanes.tgz (the device tool
# brings back at most 8 files); a summary line per file is printed last and kept in $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOGS=/tmp/lanes; rm -rf "$LOGS"; mkdir -p "$LOGS"; : > "$OUT/lanes-summary.txt"
LIMIT=${LIMIT:-240}
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-cache}
lane() {
    local items; IFS=, read -r -a items <<< "$1"
    for f in "${items[@]}"; do  # an item may carry pytest options: "path --deselect node"
        local name; name=$(echo "${f%% *}" | tr '/:[]' '____' | sed 's/\.py//')
        local start=$SECONDS
        # shellcheck disable=SC2086
        timeout "$LIMIT" python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs $f \
            > "$LOGS/$name.log" 2>&1
        local rc=$?
        local last; last=$(grep -E "passed|failed|error|skipped|no tests" "$LOGS/$name.log" | tail -1)
        # NOTE: into $OUT as each file ends too, so a call cut off at its limit still reports
        printf '%-60s rc=%-3s %4ss  %s\n' "$f" "$rc" $((SECONDS - start)) "$last" \
            | tee -a "$OUT/lanes-summary.txt" >> "$LOGS/summary.txt"
    done
}
for spec in "$@"; do lane "$spec" & done
wait
tar -C /tmp -czf "$OUT/lanes.tgz" lanes
cat "$LOGS/summary.txt"
