#!/usr/bin/env bash
# What every lane of tools/gpu/open_issue_checks.sh and tools/gpu/closed_lanes.sh shares: $OUT, the
# time-limited benchmark runner `b`, Nsight Compute, the NVFP4 cubin builds and tilings-file helpers.
# Sourced, not run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-cache}
# one benchmark under a time limit: its output in $OUT/<name>.log, its exit status and seconds in rc.txt
b() { local name=$1 limit=$2; shift 2; local t=$SECONDS
      timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
      echo "$name rc=$? $((SECONDS - t))s" >> "$OUT/rc.txt"; }
# a lane that measures the H200 alone ($1: its name): the card's name into $OUT/card.txt, and
# exit 3 on any other card before anything is built
only_h200() { nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
              grep -q H200 "$OUT/card.txt" || { echo "not an H200: $1 measures the H200"; exit 3; }; }
# Nsight Compute's command line: on PATH, else the first install under /opt/nvidia (by name)
ncu_exe() { command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1; }
# the PDL cubins of rings of each depth given (4 warps a block; 8 warps too in rings of at most
# 5, mma_gemv.WIDE_MAX_STAGES), in each column map and trigger, built at once into the disk cache
# (NO_PDL=1: the non-PDL ones of rings of 4 too; PREFETCH: the PDL ones' prefetch as Python, e.g.
# '"run"', default 0; ROW_SCALE: their row_scale read, default end), so no timed run waits on nvcc
pdl_cubins() { local stages cols trig pf=${PREFETCH:-0} rs=${ROW_SCALE:-end}
    for cols in contiguous coalesced; do
        for trig in read start; do
            for stages in "$@"; do
                python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', $stages, prefetch=$pf, pdl=True, columns='$cols', trigger='$trig', row_scale='$rs')" &
                [ "$stages" -le 5 ] && python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', $stages, prefetch=$pf, pdl=True, warps=8, columns='$cols', trigger='$trig', row_scale='$rs')" &
            done
        done
        if [ "${NO_PDL:-0}" = 1 ]; then
            python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, columns='$cols')" &
            python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, warps=8, columns='$cols')" &
        fi
    done
    wait; }
# a shipped tilings file (PLAN_DEVICE, default this card's) into $1 with the keys named after it
# dropped from every entry ("r16.from": from its 16-row launch) or set in every entry
# ("spread=true", "trigger=\"start\"": the value as JSON), or in one shape's alone
# ("4096x12288:form=\"plain\""), for an A/B against the shipped file
plan_without() { local out=$1; shift
    local card; card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    python3 - "$out" "${PLAN_DEVICE:-$card}" "$@" <<'PY'
import json, sys
from hinge_nvfp4 import mma_tiling
plan = mma_tiling.tuned_tilings(device_name=sys.argv[2])
for shape, entry in plan.items():
    for key in sys.argv[3:]:
        key, set_to, value = key.partition("=")
        only, _, key = key.rpartition(":")
        if only and only != shape:
            continue
        place, _, leaf = key.rpartition(".")
        where = entry.get(place, {}) if place else entry
        if set_to:
            where[leaf] = json.loads(value)
        else:
            where.pop(leaf, None)
json.dump(plan, open(sys.argv[1], "w"), indent=1)
PY
}
# Nsight Compute's L1 counters of one eager MMA GEMV call (ncu_gemv.py): $1 a label, $2 the
# shape, $3 the rows; into $OUT/ncu_l1_$1$2_m$3.log (lane l1w26)
ncu_l1() { local ncu; ncu=$(ncu_exe)
    b "ncu_l1_$1$2_m$3" 100 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
        --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
        --section WarpStateStats --section LaunchStats \
        --metrics "regex:^l1tex__data_pipe_lsu_wavefronts.*\.sum$,regex:^l1tex__t_(sectors|requests)_pipe_lsu_mem_global_op_(ld|ldgsts).*\.sum$,regex:^smsp__inst_executed_op_(global_ld|shared_ld|ldgsts|ldsm).*\.sum$,regex:^l1tex__.*\.avg\.pct_of_peak_sustained_elapsed$" \
        python3 tools/gpu/ncu_gemv.py mma "$2" --m "$3"; }
ncu_l1_table() { local f
    for f in "$OUT"/ncu_l1_*.log; do echo "== $f"; grep -E "^tiling|Duration|L1/TEX Cache Throughput|Warp Cycles Per Issued|lsu_wavefronts_mem_(lgds|shared)_cmd_read.sum|lsu_wavefronts.avg|bank_conflicts_pipe_lsu_mem_gds_op_ld.avg|global_op_ld.sum|inst_executed_op_(global_ld|shared_ld|ldgsts).sum" "$f" | sed 's/  */ /g'; done; }
# NVFP4 end to end with the defaults and with the H100's tilings file, then the GEMVs back to
# back under each (the cubins of both files built first): lanes h200y, h200n
nvfp4_both_files() {
    local h100=plugins/quant_nvfp4/hinge_nvfp4/tuned/NVIDIA_H100_80GB_HBM3.json
    pdl_cubins 4 8 & ROW_SCALE=wait pdl_cubins 4 & wait
    b e2e_defaults 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$h100"
    b chain 100 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "scale wait"
    b chain_h100 100 env HINGE_NVFP4_MMA_PLAN="$h100" python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped
    grep -E "/ bf16|decoding" "$OUT/e2e_defaults.log"; grep -v "^ " "$OUT/chain.log" "$OUT/chain_h100.log"
}
# the register form's GPU tests (its cubins built first), then launch_chain at 1 and 8 rows with
# the arguments given (shapes, variants): lane r22
register_form() {
    NO_PDL=1 pdl_cubins 4
    b regs_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k register_form
    b regs_chain 150 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 "$@"
}
# the H100 file as shipped, lane $1's logs: kernel: mma's and the engine's GPU tests of -k $2
# ($1_tests), the GEMM table at 1 .. 16 rows (gemm_$1), end to end against the file without
# the keys after the limits (e2e_$1); $3 $4 $5: the three's limits in seconds
shipped_file() { local name=$1 tests=$2 t1=$3 t2=$4 t3=$5; shift 5
    plan_without "$OUT/plan-before.json" "$@"
    b "${name}_tests" "$t1" python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py -k "$tests"
    b "gemm_$name" "$t2" python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 50 --ms 1 2 4 6 8 12 16
    b "e2e_$name" "$t3" python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-before.json"
    cat "$OUT/rc.txt"; tail -2 "$OUT/${name}_tests.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/gemm_$name.log"
    grep -E "/ bf16|decoding" "$OUT/e2e_$name.log"
}
# the H200's tilings file before 2026-12-07 (the H100's file ships for it since), as $1: the device
# copy of the tree has no git history to take it from
old_h200_plan() { python3 - "$1" <<'PY'
import json, sys
def entry(kwarps, stages, layout, form):
    return {"splits": 1, "kwarps": kwarps, "stages": stages, "layout": layout, "form": form, "prefetch": 0}
json.dump({"6144x4096": entry(4, 4, "interleaved", "bulk"), "24576x4096": entry(1, 4, "interleaved", "plain"),
           "4096x12288": entry(4, 8, "tile", "xring"), "4096x4096": entry(4, 4, "tile", "xring")},
          open(sys.argv[1], "w"), indent=1)
PY
}
