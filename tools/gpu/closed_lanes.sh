#!/usr/bin/env bash
# The measured-and-closed GPU experiments of issues 10, 11, 12 and 14, kept as the commands behind
# docs' numbers (docs/benchmarks.md, docs/gpu-results.md, docs/nvfp4.md name them); the live lanes
# are in tools/gpu/open_issue_checks.sh, which hands any other name here. The usage as it stood
# when every lane was in one file (some of these lanes moved back to open_issue_checks.sh):
#
# The GPU checks still open on issues 10, 11, 12 and 14, as two device calls of under 10 minutes
# (run from the repository root after the gpu-host pack is installed and sourced, and
# `python3 -m pip install -q -e . --no-deps --no-build-isolation`):
#
#   bash tools/gpu/open_issue_checks.sh tests    # GPU tests: one engine lane, two kernel lanes (the
#                                                 # NVFP4 tests apart: one kernel lane ran past 600 s)
#   bash tools/gpu/open_issue_checks.sh tests12  # its first two lanes (what `verify` leaves out)
#                                                 # without the sync test, + the kernel=mma test
#   bash tools/gpu/open_issue_checks.sh bench    # fa4 split decode, roofline + profiles, fa4 prefill
#                                                 # through hinge bench, prefill host times (~8 min)
#   bash tools/gpu/open_issue_checks.sh bench2   # fa4, recurrent decode, nvfp4 GEMM + sweep + end to end,
#                                                 # sync points, flashinfer decode_split_kv=auto roofline, ncu
#   bash tools/gpu/open_issue_checks.sh verify   # a short session's check (~5 min, 2026-12-02: past 290 s
#                                                 # in four lanes, so now five): the warm-up and sync
#                                                 # tests, then every other GPU test (engine lane alone)
#   bash tools/gpu/open_issue_checks.sh bench5   # the in-pool decode bits and kernel=mma tests, the
#                                                 # MMA GEMV probe, end to end with kernel=mma (~9 min)
#   bash tools/gpu/open_issue_checks.sh bench6   # kernel=mma's test, the probe in both memory
#                                                 # orders, ncu of gate_up, end to end both (~7 min)
#   bash tools/gpu/open_issue_checks.sh bench9   # kernel=mma's GPU tests, the probe with warps a
#                                                 # tile, its diagnostics, end to end two ways (~9 min)
#   bash tools/gpu/open_issue_checks.sh bench10  # the same with the interleaved layout and the L2
#                                                 # prefetch (~10 min)
#   bash tools/gpu/open_issue_checks.sh bench11  # every NVFP4 GPU test, the bulk-copy form, end to
#                                                 # end with the shipped tilings (~8 min)
#   bash tools/gpu/open_issue_checks.sh bench12  # programmatic dependent launch (HINGE_PDL=1, now the default):
#                                                 # its GPU tests, end to end without and with (~8 min)
#   bash tools/gpu/open_issue_checks.sh gated-tests  # kernel: mma's GPU tests (the gated gate_up GEMV
#                                                 # against GEMV + silu_mul, the MLP, end to end),
#                                                 # the fast kernels, fa4's split tests (~5 min)
#   bash tools/gpu/open_issue_checks.sh gated-attn  # flashinfer decode options at b1, fa4 b1 split
#                                                 # decode with and without early launch (~5 min)
#   bash tools/gpu/open_issue_checks.sh gated-e2e  # end to end with the gated GEMV (profiled) and
#                                                 # without it (HINGE_NVFP4_MMA_GATED=0) (~6 min)
#   bash tools/gpu/open_issue_checks.sh bench4   # fa4 split schedules at batch 1, recurrent tilings,
#                                                 # the hybrid's roofline with the new defaults (~7 min)
#   bash tools/gpu/open_issue_checks.sh t14 / b14  # 2026-12-06 (H100): the gated GEMV's ring exchange,
#                                                 # the rope KV write, fa4's long tail and stride-0
#                                                 # query (tests); fa4 split sizes, end to end (bench)
#   bash tools/gpu/open_issue_checks.sh p15 / t15  # 2026-12-06 (14th): MMA tilings for this card and
#                                                 # end to end with them; every fa4 GPU test
#   bash tools/gpu/open_issue_checks.sh r16 / b16  # 2026-12-06 (14th): the 16-row MMA GEMV's tests;
#                                                 # its probe, the GEMM table, end to end
#   bash tools/gpu/open_issue_checks.sh c16      # the MMA GEMV's shared memory carveout A/B (~5 min)
#   bash tools/gpu/open_issue_checks.sh n16      # ncu of gate_up's MMA GEMV at 8 and 16 rows (~3 min)
#   bash tools/gpu/open_issue_checks.sh t2       # two tiles a warp at 16 rows: tests, engine, probe (~4 min)
#   bash tools/gpu/open_issue_checks.sh next15   # what the 14th session left unrun: tests with r16, the
#                                                 # GEMM table with/without PDL, a tilings file with r16
#   bash tools/gpu/open_issue_checks.sh next16 / bench16  # 2026-12-06 (15th): kernel: mma from its
#                                                 # repack alone, auto -> mma (tests); GEMM table
#                                                 # to prefill sizes, end to end with a prefill
#   bash tools/gpu/open_issue_checks.sh dq16     # the dequantizing kernel's forms: bits and times
#   bash tools/gpu/open_issue_checks.sh host16   # launches' parameter blocks built once: tests, end to end
#   bash tools/gpu/open_issue_checks.sh kw17     # 2026-12-06 (16th): eight warps a tile: tests, the
#                                                 # GEMVs back to back under kw8 tilings
#   bash tools/gpu/open_issue_checks.sh sweep17  # every form and order at 4 and 8 warps a tile
#   bash tools/gpu/open_issue_checks.sh e2e17    # end to end: down at 8 warps a tile against 4
#   bash tools/gpu/open_issue_checks.sh trace19  # 2026-12-06 (18th): the GEMVs' warps' timelines
#   bash tools/gpu/open_issue_checks.sh spread19 / spread19b  # launches spread over the
#                                                 # multiprocessors: A/B (19b: the carveout the driver's)
#   bash tools/gpu/open_issue_checks.sh final19  # the H100 file spread: tests, GEMM table, end to end
#   bash tools/gpu/open_issue_checks.sh start19  # the next kernel let launch at a GEMV's start: A/B
#   bash tools/gpu/open_issue_checks.sh last19   # shipped / spread / spread + start: chain, end to end
#   bash tools/gpu/open_issue_checks.sh from19   # spread: the 8-row kernel again below 9 rows?
#   bash tools/gpu/open_issue_checks.sh co20     # 2026-12-06 (19th): the next GEMV's blocks beside
#                                                 # this one's, rings of 8 before the wait
#   bash tools/gpu/open_issue_checks.sh h200x    # an H200 only: its file against the H100's, end to end
#   bash tools/gpu/open_issue_checks.sh pdl21    # 2026-12-06 (20th): each shape's memory side alone
#                                                 # (the ring form) launched as shipped, deep, no PDL
#   bash tools/gpu/open_issue_checks.sh pdl21b   # K in 2 or 4 splits, GEMV and memory side; a plain read
#   bash tools/gpu/open_issue_checks.sh t22 / b22  # 2026-12-06 (21st): every fa4 GPU test at this
#                                                 # tree; fa4's benchmarks (raw, hinge, flashinfer;
#                                                 # prefill through hinge bench), a read with PDL
#   bash tools/gpu/open_issue_checks.sh e22      # the GEMV that asks for all its weights before its
#                                                 # wait: GPU tests, its tilings against mma (mini site)
#   bash tools/gpu/open_issue_checks.sh w22      # a read launched plain, early with its loads before
#                                                 # its wait, early waiting first: every program size
#   bash tools/gpu/open_issue_checks.sh r22      # the register form (regs): its bits against plain,
#                                                 # then back to back against shipped (mini site)
#   bash tools/gpu/open_issue_checks.sh trace22  # regs' memory side alone; the warps' timelines: shipped, regs
#   bash tools/gpu/open_issue_checks.sh l2run22  # every warp's run asked of L2 before its wait: tests, chain, e2e
#   bash tools/gpu/open_issue_checks.sh wait23   # shipped's timelines: as shipped, waiting before its copies, "run"
#   bash tools/gpu/open_issue_checks.sh early23  # row_scale read at the start: bits test, timelines of both
#   bash tools/gpu/open_issue_checks.sh shallow23  # rings of 3 and 2 back to back against shipped's 4
#   bash tools/gpu/open_issue_checks.sh early24  # "row_scale" start / wait from a tilings file: bits, back to back, end to end
#   bash tools/gpu/open_issue_checks.sh early28 # fa4 launched early: its tests, the benchmark (~6 min)
#   bash tools/gpu/open_issue_checks.sh suite28 # then every fa4 GPU test, the GEMVs back to back (~8 min)
#   bash tools/gpu/open_issue_checks.sh l1w26   # ncu: L1 counters of qkv at 1 / 8 / 16 rows, down at 8, gate_up at 1 and 8 (~4 min)
#   bash tools/gpu/open_issue_checks.sh wait25  # the H100 file with row_scale wait: engine GPU tests, GEMM table, end to end
#   bash tools/gpu/open_issue_checks.sh h200n    # h200y's NVFP4 half alone (mini site)
#   bash tools/gpu/open_issue_checks.sh h200m    # h200n and the PDL read of each shape (mini site)
#   bash tools/gpu/open_issue_checks.sh h200y    # an H200 only (whole pack): issue 14's
#                                                 # benchmark and fa4's batch-1 layer with the KV
#                                                 # stored; nvfp4 end to end and back to back; the
#                                                 # PDL read (~6 min)
#   bash tools/gpu/open_issue_checks.sh ceil17   # a plain read of each shape's bytes, cuBLAS, mma;
#                                                 # kernel: mma's and the engine's NVFP4 GPU tests
#   bash tools/gpu/open_issue_checks.sh ab14     # fa4's tail rules on one card, end to end with
#                                                 # the defaults (~2 min)
#   bash tools/gpu/open_issue_checks.sh verify-bench  # qwen3 default roofline (no transformers), a
#                                                 # short list of M = 1 GEMV tilings (gate|up, qkv),
#                                                 # fa4 attention, fa4 prefill through hinge bench,
#                                                 # the hybrid with HINGE_TOKEN_RECURRENCE_MAX=512
#
# Engine tests share one lane: each engine sizes its KV pool from the free memory it sees, so two
# engines starting at once on one card miscount each other's allocations (docs/gpu-results.md).
# Logs: $OUT/lanes.tgz and $OUT/lanes-summary.txt (tests), $OUT/<name>.log and JSON (bench).
. "$(dirname "$0")/lane_helpers.sh"
case "${1:-}" in
followup)
    # 2026-12-02 (eighth session), after verify and a trimmed verify-bench: the GEMV prefetch
    # test and fa4's new split knobs, the MMA GEMV probe (context fix), fa4 batch-1 split forms,
    # the recurrent tiling sweep, the hybrid with and without HINGE_TOKEN_RECURRENCE_MAX
    b tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        "plugins/quant_nvfp4/tests/test_triton_gemv.py::test_cuda_gemv_every_swept_tiling_is_correct_and_the_same_bits_every_run" \
        plugins/attn_fa4/tests/test_fa4_gpu.py -k "every_swept or split_call_matches"
    b nvfp4_mma 180 python3 tools/gpu/nvfp4_mma_probe.py  # sync and cp.async-ring kernels
    b fa4_split 120 python3 tools/gpu/fa4_split_decode.py --batch 1 --split-sizes 256 384 512 \
        --forms tile64 tile64-nopack tile64x64 tile64x64-nopack
    b recurrent 90 python3 tools/gpu/recurrent_decode.py --sweep
    b hybrid_fla 120 python3 tools/gpu/roofline.py --arch qwen3_5 --size 9b --modes default --skip-hf
    b hybrid_token_recurrence 120 env HINGE_TOKEN_RECURRENCE_MAX=512 python3 tools/gpu/roofline.py \
        --arch qwen3_5 --size 9b --modes default --skip-hf
    cat "$OUT/rc.txt"; tail -3 "$OUT/tests.log"; tail -18 "$OUT/nvfp4_mma.log"
    grep -E "^\| 1 " "$OUT/fa4_split.log"; tail -4 "$OUT/hybrid_fla.log"
    tail -4 "$OUT/hybrid_token_recurrence.log"; tail -10 "$OUT/recurrent.log"
    ;;
bench5)
    # ninth session: the in-pool decode bits fix (2c57828), the MMA GEMV rewritten (supersteps of
    # eight MMAs, scales folded into the A fragments): its GPU test, the probe, end to end
    b tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/hybrid/test_decode_in_pool_gpu.py plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 200 python3 tools/gpu/nvfp4_mma_probe.py
    b nvfp4_e2e_mma 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; tail -3 "$OUT/tests.log"; tail -18 "$OUT/nvfp4_mma.log"
    tail -6 "$OUT/nvfp4_e2e_mma.log"
    ;;
bench6)
    # ninth session, second machine: kernel=mma's GPU test; the probe in both memory
    # orders and forms; Nsight Compute on gate_up and o (M = 1); end to end with kernel=mma as it
    # is, and in the order and form the probe found fastest
    b tests 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 120 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 8 --best-json "$OUT/mma_best.json"
    b nvfp4_e2e 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    best=$(python3 -c "import json; d = json.load(open('$OUT/mma_best.json')); print(d['layout'], d['form'])" 2>/dev/null)
    if [ -n "$best" ] && [ "$best" != "tile plain" ]; then
        set -- $best
        b nvfp4_e2e_best 120 env HINGE_NVFP4_MMA_LAYOUT=$1 HINGE_NVFP4_MMA_FORM=$2 python3 tools/gpu/nvfp4_gemm.py \
            --skip-table --e2e-kernel mma
    fi
    ncu=$(ncu_exe)
    for shape in ${NCU_SHAPES:-gate_up o}; do
        b "ncu_mma_$shape" 60 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
            --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
            --section Occupancy --section LaunchStats python3 tools/gpu/ncu_gemv.py mma "$shape"
    done
    cat "$OUT/rc.txt"; tail -1 "$OUT/tests.log"; tail -20 "$OUT/nvfp4_mma.log"
    echo "best: $best"; tail -2 "$OUT/nvfp4_e2e.log"; tail -2 "$OUT/nvfp4_e2e_best.log" 2>/dev/null
    ;;
bench7)
    # ninth session, third machine (a few minutes of device time): the scale words copied 16
    # bytes a lane by lanes 0..7 (L1 left to x), its GPU test, the probe on gate_up and down at
    # M = 1, and the stall reasons of gate_up's kernel under Nsight Compute
    b tests 60 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 60 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 8 --layouts tile --forms plain \
        --shapes gate_up down qkv o --ms 1
    ncu=$(ncu_exe)
    b ncu_stalls 60 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
        --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        python3 tools/gpu/ncu_gemv.py mma gate_up
    cat "$OUT/rc.txt"; tail -1 "$OUT/tests.log"; tail -8 "$OUT/nvfp4_mma.log"
    grep -E "Duration|DRAM Throughput|Issued Warp|issue_stalled" "$OUT/ncu_stalls.log" | sort -k3 -g -r | head -14
    ;;
bench8)
    # written after the ninth session's device time, for the next: end to end at the final tree
    # (the scale-copy change 691b72e was timed by the probe only), the MMA GEMV against its
    # memory side alone and its arithmetic alone (--diagnose), the xring form (x in the ring:
    # its GPU test, the probe of every form), and which instructions of
    # gate_up's kernel stall (source counters: SASS lines with their stall samples; the
    # --print-source flag is unverified here: ncu --help on the device says)
    b nvfp4_e2e 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b mma_diagnose 60 python3 tools/gpu/nvfp4_mma_probe.py --diagnose
    b mma_tests_xring 60 env HINGE_NVFP4_MMA_FORM=xring python3 -m pytest -q -m gpu -p no:cacheprovider \
        -rfEs plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 100 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 8 --layouts tile --ms 1 2 8
    ncu=$(ncu_exe)
    b ncu_source 90 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
        --launch-count 1 --section SourceCounters --section WarpStateStats --print-source sass \
        python3 tools/gpu/ncu_gemv.py mma gate_up
    cat "$OUT/rc.txt"; tail -2 "$OUT/nvfp4_e2e.log"; tail -6 "$OUT/mma_diagnose.log"
    tail -1 "$OUT/mma_tests_xring.log"; grep WRONG "$OUT/nvfp4_mma.log"; tail -16 "$OUT/nvfp4_mma.log"
    grep -c . "$OUT/ncu_source.log"
    ;;
bench9)
    # tenth session: the MMA GEMV with 1, 2 or 4 warps a tile (their sums added in shared memory)
    # and mma_gemv.tiling: its GPU tests, the probe of every (form, ring, splits, warps a tile)
    # writing the fastest tiling a shape, the memory and arithmetic sides at each, end to end with
    # the built-in tilings and with the probe's
    b mma_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 150 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 8 --layouts tile --forms plain xring \
        --kwarps 1 2 4 --splits 1 2 4 8 --ms 1 4 8 --all-json "$OUT/probe-all.json" --plan-json "$OUT/plan.json"
    b mma_diagnose 60 python3 tools/gpu/nvfp4_mma_probe.py --diagnose --kwarps 1 2 4 --splits 1 2 4
    b nvfp4_e2e 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-plan - "$OUT/plan.json"
    cat "$OUT/rc.txt"; tail -3 "$OUT/mma_tests.log"; grep WRONG "$OUT/nvfp4_mma.log"
    tail -16 "$OUT/nvfp4_mma.log"; cat "$OUT/plan.json"; tail -14 "$OUT/mma_diagnose.log"
    tail -6 "$OUT/nvfp4_e2e.log"
    ;;
bench10)
    # tenth session, second machine: the memory side (bench9: gate_up's weights streamed alone
    # at 3.02 TB/s, more warps slower): the interleaved layout (a block's scales after its
    # codes) and the copies' L2 prefetch, in the probe and the diagnostics; end to end with the
    # new built-in tilings and the probe's
    b mma_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/quant_nvfp4/tests/test_mma_kernel.py
    b nvfp4_mma 200 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 --forms plain xring --kwarps 1 2 4 \
        --splits 1 2 8 --prefetch 0 256 --ms 1 4 --all-json "$OUT/probe-all.json" --plan-json "$OUT/plan.json"
    b mma_diagnose 90 python3 tools/gpu/nvfp4_mma_probe.py --diagnose --kwarps 1 4 --splits 1 8 --prefetch 0 128 256
    b nvfp4_e2e 150 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-plan - "$OUT/plan.json"
    cat "$OUT/rc.txt"; tail -3 "$OUT/mma_tests.log"; grep WRONG "$OUT/nvfp4_mma.log"
    tail -12 "$OUT/nvfp4_mma.log"; cat "$OUT/plan.json"; grep -E "gate_up|down" "$OUT/mma_diagnose.log"
    tail -5 "$OUT/nvfp4_e2e.log"
    ;;
bench11)
    # tenth session, third machine: the bulk-copy form (Hopper's cp.async.bulk, an mbarrier a
    # slot), every NVFP4 GPU test at the final tree, the probe of the forms, end to end with the
    # shipped H200 tilings (hinge_nvfp4/tuned) and with this probe's
    b nvfp4_gpu 220 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/quant_nvfp4/tests
    b nvfp4_mma 120 python3 tools/gpu/nvfp4_mma_probe.py --stages 4 --layouts tile interleaved \
        --forms plain bulk xring --kwarps 1 4 --splits 1 2 8 --ms 1 4 --all-json "$OUT/probe-all.json" \
        --plan-json "$OUT/plan.json"
    b nvfp4_e2e 150 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-plan - "$OUT/plan.json"
    cat "$OUT/rc.txt"; tail -3 "$OUT/nvfp4_gpu.log"; grep WRONG "$OUT/nvfp4_mma.log"
    tail -12 "$OUT/nvfp4_mma.log"; cat "$OUT/plan.json"; tail -5 "$OUT/nvfp4_e2e.log"
    ;;
bench12)
    # written after the tenth session's device time, for the next: programmatic dependent launch
    # (HINGE_PDL=1: add_rmsnorm and silu_mul trigger their dependents at their start, kernel: mma's
    # GEMVs launch with programmatic serialization and copy their first weights before waiting):
    # the GPU tests (the PDL GEMV after an early-triggering norm, eager and in a graph; the fast
    # kernels), then end to end without and with it, the second with the step's kernels
    b mma_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py tests/layers/test_fast_triton.py \
        plugins/quant_nvfp4/tests/test_end_to_end.py
    b nvfp4_e2e 150 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b nvfp4_e2e_pdl 200 env HINGE_PDL=1 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-profile
    cat "$OUT/rc.txt"; tail -3 "$OUT/mma_tests.log"; tail -3 "$OUT/nvfp4_e2e.log"; tail -3 "$OUT/nvfp4_e2e_pdl.log"
    grep -E "^nvfp4: batch|^none: batch" "$OUT/nvfp4_e2e_pdl.log"
    ;;
gated-tests)
    # twelfth session: silu_mul in the gate_up GEMV's epilogue (Quantizer.apply_gated), GEMVs
    # triggering their dependents, the core's norms / KV write and fa4's split kernels launched
    # early; their GPU tests (~5 min)
    b mma_tests 220 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py tests/layers/test_fast_triton.py \
        tests/layers/test_kv_write.py plugins/quant_nvfp4/tests/test_end_to_end.py
    b fa4_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/attn_fa4/tests/test_fa4_gpu.py -k "merge or three or captured or alone or tiny"
    cat "$OUT/rc.txt"; tail -3 "$OUT/mma_tests.log"; tail -3 "$OUT/fa4_tests.log"
    ;;
gated-attn)
    # flashinfer's batch-1 decode options at the e2e's ~130 keys and at 4k; fa4's batch-1 split
    # decode with and without early launches (~5 min)
    b fi_decode 150 python3 tools/gpu/flashinfer_attention.py --batch 1 --context 130 --layers 36 \
        --options '{}' '{"decode_tensor_cores": "off"}' '{"decode_split_kv": "never"}' \
        '{"decode_tensor_cores": "off", "decode_split_kv": "never"}'
    b fi_decode_4k 90 python3 tools/gpu/flashinfer_attention.py --batch 1 16 --context 4096 --layers 36 \
        --options '{}' '{"decode_tensor_cores": "off"}'
    b fa4_split 90 python3 tools/gpu/fa4_split_decode.py --batch 1 --split-sizes 384 512 --forms tile64
    b fa4_split_nopdl 90 env HINGE_PDL=0 python3 tools/gpu/fa4_split_decode.py --batch 1 --split-sizes 384 512 --forms tile64
    cat "$OUT/rc.txt"; grep -E "^flashinfer|^ +[0-9]+ " "$OUT/fi_decode.log" "$OUT/fi_decode_4k.log"
    grep -E "^\| 1 " "$OUT/fa4_split.log" "$OUT/fa4_split_nopdl.log"
    ;;
gated-ab)
    # the gated GEMV's pair exchange in shared memory: its GPU tests, then end to end fused /
    # unfused / fused with flashinfer's CUDA-core decode, unprofiled (~4 min)
    b mma_gated_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py -k "gated or early"
    b e2e_fused 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_unfused 120 env HINGE_NVFP4_MMA_GATED=0 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_fused_cuda_core 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma \
        --attention-options '{"decode_tensor_cores": "off"}'
    cat "$OUT/rc.txt"; tail -3 "$OUT/mma_gated_tests.log"
    grep -H -E "/ bf16|^  (none|nvfp4):" "$OUT"/e2e_*.log
    ;;
gated-mlp)
    # the MLP at batch 1 gated / unfused, and gate_up's parts, replayed in turn (~1 min)
    b gated_mlp 150 python3 tools/gpu/gated_mlp.py --layers 36 --distinct 4
    cat "$OUT/rc.txt"; tail -12 "$OUT/gated_mlp.log"
    ;;
gated-final)
    # which edges launch early in the MLP, then end to end: fused with down after the gated GEMV
    # (the default), fused with down early, unfused, fused with CUDA-core decode; the gated
    # GPU tests (~6 min)
    b gated_mlp 120 python3 tools/gpu/gated_mlp.py --layers 36 --distinct 4
    b e2e_fused 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_fused_down_early 100 env HINGE_NVFP4_MMA_AFTER_GATED=early python3 tools/gpu/nvfp4_gemm.py \
        --skip-table --e2e-kernel mma
    b e2e_unfused 100 env HINGE_NVFP4_MMA_GATED=0 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_fused_cuda_core 100 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma \
        --attention-options '{"decode_tensor_cores": "off"}'
    b mma_gated_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py -k "gated or early"
    cat "$OUT/rc.txt"; tail -20 "$OUT/gated_mlp.log"; tail -2 "$OUT/mma_gated_tests.log"
    grep -H -E "/ bf16|^  (none|nvfp4):" "$OUT"/e2e_*.log | sed 's/(quantizer.*//'
    ;;
t14)
    # the thirteenth session (2026-12-06)'s tests (~5 min): the gated GEMV's pair exchange in the ring and the
    # rope kernel's KV write (both written after the twelfth session's device time), fa4's split
    # with the long tail, the 16-part merge and the stride-0 query view; engine tests in one lane
    ( b engines 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py \
        tests/engine/test_rope_kv_write_gpu.py -k "gated or early or rope_kv" ) &
    ( b kernels 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/layers/test_fast_triton.py plugins/attn_fa4/tests/test_fa4_gpu.py \
        -k "kv_target or split or merge or alone or captured or kv_written or restatement" ) &
    wait
    cat "$OUT/rc.txt"; tail -4 "$OUT/engines.log"; tail -4 "$OUT/kernels.log"
    ;;
p15)
    # the fourteenth session (2026-12-06)'s first call (~6 min): the MMA GEMV's tilings at M = 1
    # on this card (a tuned file for it, --plan-json, stages the kernel object builds), a plain
    # read of each shape's bytes for scale; end to end with the built-in tiling and that file
    name=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
    b probe 240 python3 tools/gpu/nvfp4_mma_probe.py --ms 1 --stages 4 8 --kwarps 1 2 4 \
        --iters 50 --plan-json "$OUT/$name.json"
    b e2e_plans 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma \
        --e2e-plan - "$OUT/$name.json"
    cat "$OUT/rc.txt"; grep -E "^\| |% of" "$OUT/probe.log"; grep -E "/ bf16|decoding" "$OUT/e2e_plans.log"
    ;;
t22)
    # every fa4 GPU test (the contract against the torch reference, graphs, splits, end to end
    # against flashinfer) at this tree (~5 min)
    b fa4_tests 560 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/attn_fa4/tests
    cat "$OUT/rc.txt"; tail -6 "$OUT/fa4_tests.log"
    ;;
b22)
    # issue 14's benchmark (fa4_attention.py: 8k causal prefill against the matmul rate, decode
    # at batch 1, 16, 128 with 4k keys against flashinfer and the copy rate; the prefill through
    # hinge bench), then a plain read of each NVFP4 shape's bytes launched with and without PDL
    # beside kernel: mma (~7 min)
    b fa4 120 python3 tools/gpu/fa4_attention.py
    b fa4_prefill 170 python3 tools/gpu/fa4_prefill_bench.py
    b ceil_pdl 200 python3 tools/gpu/read_ceiling.py --iters 20
    cat "$OUT/rc.txt"; grep -E "^\|" "$OUT/fa4.log" "$OUT/fa4_prefill.log"; cat "$OUT/ceil_pdl.log"
    ;;
e22)
    # the GEMV that asks for every weight before its PDL wait (tools/gpu/nvfp4_early.py, a
    # diagnostic: its GPU test, which ran past 150 s compiling when it stood in the plugin, was
    # dropped when it moved there): its tilings swept against kernel: mma and the Triton GEMV at
    # 1, 8 and 16 rows (ran past 400 s in down's 8-row tilings: pass --ms 1 for a short call)
    b early_sweep 400 python3 tools/gpu/nvfp4_early.py --ms 1 8 16
    cat "$OUT/rc.txt"; grep -E "^\||WRONG" "$OUT/early_sweep.log"
    ;;
r22)
    # the MMA GEMV's register form (no ring; a warp's first 8 supersteps loaded before the wait):
    # its GPU tests (the plain form's bits, gated, PDL, a graph), then the GEMVs back to back,
    # shipped against regs (~3 min; the H100 file's down is 8 warps a tile, which regs is not)
    # (2026-12-06, 22nd: 8 supersteps in flight, refilled as each is computed; down at 4 warps)
    register_form --shapes qkv gate_up o --variants shipped regs "regs read" "regs kw2" "regs kw4"
    b regs_down 120 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --shapes down --variants shipped "regs kw4" "regs kw2"
    cat "$OUT/rc.txt"; tail -3 "$OUT/regs_tests.log"; grep -v "^ " "$OUT/regs_chain.log" "$OUT/regs_down.log"
    ;;
trace22)
    # where the register form's time goes (2026-12-06, 22nd: regs was slower than shipped on
    # every shape): its memory side alone (regs fold) beside the ring form's and the GEMVs, then
    # the warps' timelines of the shipped file and of every shape in regs at 4 warps a tile
    # (down's 8 is not built for it), M = 1, each call after the one before (~4 min)
    b fold_chain 90 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --shapes qkv gate_up o \
        --variants shipped ring regs "regs fold"
    b fold_down 60 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --shapes down \
        --variants shipped ring "regs kw4" "regs fold kw4"
    grep -v "^ " "$OUT/fold_chain.log" "$OUT/fold_down.log"
    b trace_shipped 200 python3 tools/gpu/nvfp4_trace.py --shapes qkv gate_up down o
    plan_without "$OUT/plan-regs.json" 'form="regs"' 'kwarps=4'
    b trace_regs 200 env HINGE_NVFP4_MMA_PLAN="$OUT/plan-regs.json" python3 tools/gpu/nvfp4_trace.py \
        --shapes qkv gate_up down o
    cat "$OUT/rc.txt"; tail -30 "$OUT/trace_shipped.log"; tail -30 "$OUT/trace_regs.log"
    ;;
l2run22)
    # 2026-12-06 (22nd): each warp asks L2 for its whole run before griddepcontrol.wait
    # (prefetch "run"), as the PDL read asks for all its bytes: its cubins built at once, its GPU
    # test (the bits without it), the GEMVs back to back at 1, 8, 16 rows, end to end (~6 min)
    pdl_cubins 4 & PREFETCH='"run"' pdl_cubins 4 & wait
    b run_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k asking_l2
    b run_chain 150 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped run "run read" ring "ring run"
    cat "$OUT/rc.txt"; tail -3 "$OUT/run_tests.log"; grep -v "^ " "$OUT/run_chain.log"
    plan_without "$OUT/plan-run.json" 'prefetch="run"'
    b run_e2e 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-run.json"
    cat "$OUT/rc.txt"; grep -E "/ bf16|decoding" "$OUT/run_e2e.log"
    ;;
wait23)
    # what shipped's 1.0 us at griddepcontrol.wait is (2026-12-06, 23rd): the warps' timelines
    # of the shipped file, of the same with the wait before the ring's first copies (nothing of
    # the warp's in flight: the call before alone), and with each warp's run asked of L2 before
    # the wait (prefetch "run"), M = 1 (~4 min)
    b trace_shipped 150 python3 tools/gpu/nvfp4_trace.py --shapes qkv gate_up down o
    b trace_wait_first 150 python3 tools/gpu/nvfp4_trace.py --shapes qkv gate_up down o --wait-first
    plan_without "$OUT/plan-run.json" 'prefetch="run"'
    b trace_run 150 env HINGE_NVFP4_MMA_PLAN="$OUT/plan-run.json" python3 tools/gpu/nvfp4_trace.py \
        --shapes qkv gate_up down o
    cat "$OUT/rc.txt"; for t in shipped wait_first run; do echo "== $t"; grep -E "M = 1:|call |\[[014]\]" "$OUT/trace_$t.log"; done
    ;;
early23)
    # the epilogue's row_scale read at the start, before the wait (mma_gemv.build_cubin
    # row_scale "start"; 2026-12-06, 23rd: the last warp's done came 0.5-1.0 us after its last
    # superstep, the epilogue's load the call's last round trip): its cubins, its GPU bits test
    # against the build without it, then the timelines and traced graphs of both (~5 min)
    pdl_cubins 4 & ROW_SCALE=start pdl_cubins 4 & wait
    b early_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "row_scale_before_the_loop and start"
    b trace_late 150 python3 tools/gpu/nvfp4_trace.py --shapes qkv gate_up down o --row-scale end
    b trace_early 150 python3 tools/gpu/nvfp4_trace.py --shapes qkv gate_up down o --row-scale start
    cat "$OUT/rc.txt"; tail -3 "$OUT/early_tests.log"
    for t in late early; do echo "== $t"; grep -E "M = 1:|call |\[[14]\]" "$OUT/trace_$t.log"; done
    ;;
shallow23)
    # rings of 3 and 2 against shipped's 4 (2026-12-06, 23rd: a warp's wait returned later the
    # more it had in flight, ~1.0 us after the call before with nothing): their cubins, their
    # bits against a ring of 4 (GPU test), then back to back (~3 min)
    pdl_cubins 2 3 4
    b shallow_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k rings_of_two
    b shallow_chain 150 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "shallow 3" "shallow 2"
    cat "$OUT/rc.txt"; tail -3 "$OUT/shallow_tests.log"; grep -v "^ " "$OUT/shallow_chain.log"
    ;;
early24)
    # when the epilogue's row_scale is read, as a tilings key ("row_scale"; 2026-12-07, 24th: read
    # at the start, the trace builds were 0.3-0.4 us faster a call on qkv, down and o, 0.3 slower
    # on gate_up, whose wait came later): the GPU bits test of "wait" (right after the wait, nothing
    # more in flight before it), back to back, then end to end with "start" on qkv, down and o
    # and with "wait" on every shape (~4 min)
    pdl_cubins 3 4 & ROW_SCALE=start pdl_cubins 4 & ROW_SCALE=wait pdl_cubins 3 4 & wait
    b wait_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "row_scale_before_the_loop and wait"
    b scale_chain 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "scale start" \
        "scale wait" "scale wait shallow 3"
    python3 - "$OUT" <<'PY'
import json, subprocess, sys
from hinge_nvfp4 import mma_tiling
card = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.splitlines()[0]
for name, when in (("start", {"6144x4096": "start", "4096x12288": "start", "4096x4096": "start"}),
                   ("wait", {"6144x4096": "wait", "24576x4096": "wait", "4096x12288": "wait", "4096x4096": "wait"})):
    plan = mma_tiling.tuned_tilings(device_name=card)
    for shape, read in when.items():
        plan[shape]["row_scale"] = read
    json.dump(plan, open(f"{sys.argv[1]}/plan-scale-{name}.json", "w"), indent=1)
PY
    b scale_start_e2e 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-scale-start.json"
    b scale_wait_e2e 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-scale-wait.json"
    cat "$OUT/rc.txt"; tail -2 "$OUT/wait_tests.log"; grep -v "^ " "$OUT/scale_chain.log"
    grep -hE "decoding" "$OUT/scale_start_e2e.log" "$OUT/scale_wait_e2e.log"
    ;;
w22)
    # what the early launch is worth to a read, by program size: plain, PDL with the loads
    # before the wait, PDL waiting first; every read of the sweep printed (~2 min)
    b reads_every 280 python3 tools/gpu/read_ceiling.py --reads plain pdl pdl-wait-first --every --iters 20
    cat "$OUT/rc.txt"; grep -E "^[a-z]" "$OUT/reads_every.log"
    ;;
t15)
    # every fa4 GPU test under the short-tail default with the stride-0 query (~4 min)
    b fa4_tests 540 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/attn_fa4/tests
    cat "$OUT/rc.txt"; tail -6 "$OUT/fa4_tests.log"
    ;;
r16)
    # the 16-row MMA GEMV (two sets of MMA columns; the tile's warps add their sums in their
    # rings): kernel: mma's GPU tests (every form, 1 .. 16 rows, gated, graphs, PDL) (~4 min)
    b mma_tests 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py
    cat "$OUT/rc.txt"; tail -6 "$OUT/mma_tests.log"
    ;;
b16)
    # its benchmarks (~6 min): the probe at M = 1, 8, 16 over the tilings that won at M = 1; the
    # GEMM table (bf16, Triton, kernel: mma, deterministic; M = 1 .. 256); end to end
    b probe16 150 python3 tools/gpu/nvfp4_mma_probe.py --ms 1 8 16 --stages 4 --kwarps 1 4 \
        --splits 1 2 --forms plain bulk xring --iters 50
    b gemm_table 200 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 100
    b e2e16 100 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; grep -E "^\| |% of" "$OUT/probe16.log"; grep -E "^(shape|qkv|gate|down|o )" "$OUT/gemm_table.log"
    grep -E "/ bf16" "$OUT/e2e16.log"
    ;;
c16)
    # the kernels' preferred shared memory carveout (the rest of L1 caches x, which every warp
    # reads whole: 128 KiB at 16 rows of K = 4096): the probe at M = 1, 8, 16 with the driver's
    # choice and 25 / 50 / 100 percent, then end to end with 50 (~5 min; ran 2026-12-06 on an
    # H100: no change; HINGE_NVFP4_MMA_CARVEOUT was removed after it, so e2e_carve50 now runs
    # the driver's choice)
    for c in default 25 50 100; do
        flag=(); [ "$c" = default ] || flag=(--carveout "$c")
        b "carve_$c" 90 python3 tools/gpu/nvfp4_mma_probe.py --ms 1 8 16 --stages 4 --kwarps 1 4 \
            --splits 1 --forms plain bulk --layouts super tile --iters 50 "${flag[@]}"
    done
    b e2e_carve50 100 env HINGE_NVFP4_MMA_CARVEOUT=50 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; for f in "$OUT"/carve_*.log; do echo "$f"; grep -E "^\| [a-z]" "$f" | cut -d'|' -f2,3,6; done
    grep -E "/ bf16" "$OUT/e2e_carve50.log"
    ;;
n16)
    # where gate_up's 16-row GEMV spends its time, against 8 rows: Nsight Compute (~3 min)
    ncu=$(ncu_exe)
    for m in 8 16; do
        b "ncu_gate_up_m$m" 100 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
            --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
            --section Occupancy --section LaunchStats python3 tools/gpu/ncu_gemv.py mma gate_up --m "$m"
    done
    cat "$OUT/rc.txt"; for m in 8 16; do grep -E "Duration|Throughput|Warp Cycles Per Issued|Issued Warp|Achieved Occupancy|Registers Per|L1/TEX Hit|L2 Hit|Stall|One or More" "$OUT/ncu_gate_up_m$m.log" | head -30; done
    ;;
t2)
    # two tiles a warp at 9 .. 16 rows: the kernel tests (every form with and without, gated,
    # Qwen3-8B shapes through kernel: mma with HINGE_NVFP4_MMA_TILES16=1 and 2), the engine at
    # batch 12 with it, then the probe at 8 and 16 rows (~4 min)
    b t2_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "every_form or gated_gemv or qwen3_8b"
    b t2_engine 70 env HINGE_NVFP4_MMA_TILES16=2 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_end_to_end.py
    b t2_probe 80 python3 tools/gpu/nvfp4_mma_probe.py --ms 8 16 --stages 4 --kwarps 1 2 4 \
        --splits 1 --forms plain bulk --layouts super tile --iters 50 --all-json "$OUT/t2_all.json"
    cat "$OUT/rc.txt"; tail -3 "$OUT/t2_tests.log"; tail -2 "$OUT/t2_engine.log"
    grep -E "^\| [a-z]" "$OUT/t2_probe.log" | cut -d'|' -f2,3,6,7
    ;;
next15)
    # what the fourteenth session left unrun (~7 min): kernel: mma's GPU tests and the engine with
    # the shipped r16 launches and two tiles a warp by default; the GEMM table with and without
    # programmatic dependent launch (the engine-style calls were slower than the probe's at 16
    # rows); the probe at 1 and 16 rows writing a tilings file with r16 entries for this card
    b next_tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py \
        plugins/quant_nvfp4/tests/test_prefill_dequant.py
    b gemm_pdl 100 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 100
    b gemm_nopdl 100 env HINGE_PDL=0 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 100
    # prefill sizes: the Triton GEMM was 2.4-5.6x slower than bf16 at M = 64 / 256
    b gemm_prefill 150 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 20 --ms 64 256 1024 8192
    name=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
    b plan16 200 python3 tools/gpu/nvfp4_mma_probe.py --ms 1 16 --stages 4 8 --kwarps 1 2 4 \
        --splits 1 2 --iters 50 --plan-json "$OUT/$name.json"
    cat "$OUT/rc.txt"; tail -3 "$OUT/next_tests.log"
    for f in gemm_pdl gemm_nopdl; do echo "$f"; grep -E "^(qkv|gate_up|down|o) +[0-9x]+ +(1|16) " "$OUT/$f.log"; done
    grep -E "^(qkv|gate_up|down|o) " "$OUT/gemm_prefill.log"
    grep -E "^\| " "$OUT/plan16.log"
    ;;
next16)
    # the fifteenth session's GPU tests (~5 min): kernel: mma from its repack alone (the
    # dequantizing kernel's bits, 16-row launches past 16 rows, the codes freed, graphs), auto ->
    # mma on sm_90, the prefill dequantization, the Triton GEMM and experts
    b next16_tests 420 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py \
        plugins/quant_nvfp4/tests/test_prefill_dequant.py plugins/quant_nvfp4/tests/test_triton_gemm.py \
        plugins/quant_nvfp4/tests/test_triton_moe.py
    cat "$OUT/rc.txt"; tail -12 "$OUT/next16_tests.log"
    ;;
bench16)
    # the fifteenth session's benchmarks (~5 min): the GEMM table at decode and prefill sizes
    # (mma column: the engine's kernel: mma, 16-row launches to 63 rows, then the weight from the
    # repack); end to end with the defaults (auto = mma here), decode and a 2048-token prefill
    b gemm16 170 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 20 --ms 1 16 32 48 64 256 1024 8192
    b e2e16 250 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-prefill 2048
    cat "$OUT/rc.txt"; grep -E "^(qkv|gate_up|down|o) " "$OUT/gemm16.log"; grep -E "prefill|/ bf16|decoding" "$OUT/e2e16.log"
    ;;
dq16)
    # the dequantizing kernel's two forms (~3 min): their bits (every layout, paired, a ragged
    # last warp), kernel: mma past 16 rows, and their times against the Triton dequantization
    b dq_tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "dequantized_from_the_repack or past_sixteen"
    b dq_bench 150 python3 tools/gpu/nvfp4_dequant.py
    cat "$OUT/rc.txt"; tail -3 "$OUT/dq_tests.log"; cat "$OUT/dq_bench.log"
    ;;
host16)
    # parameter blocks built once a launcher (~4 min): kernel: mma's GPU tests, the engine's, end
    # to end with the defaults (every launch's parameters now set in place)
    b host_tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py
    b host_e2e 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-prefill 2048
    cat "$OUT/rc.txt"; tail -3 "$OUT/host_tests.log"; grep -E "prefill|/ bf16|decoding" "$OUT/host_e2e.log"
    ;;
col18)
    # 2026-12-06 (17th, ~5 min): the coalesced column map (each x load of a row's four lanes 64
    # contiguous bytes): kernel: mma on the Qwen3-8B shapes in it, then the shipped tilings back
    # to back in both maps at 1, 4, 8 and 16 rows
    for cols in contiguous coalesced; do for warps in 4 8; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, warps=$warps, columns='$cols')" &
    done; done
    wait
    b col_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "qwen3_8b and coalesced"
    b col_chain 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 4 8 16 --variants shipped \
        --columns contiguous coalesced
    cat "$OUT/rc.txt"; tail -3 "$OUT/col_tests.log"; cat "$OUT/col_chain.log"
    ;;
e2e18)
    # 2026-12-06 (17th, ~4 min): end to end, the default column map against the coalesced one
    # in one process (bf16, then nvfp4 in each)
    b e2e_cols 300 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-env - HINGE_NVFP4_MMA_COLUMNS=coalesced
    cat "$OUT/rc.txt"; grep -E "/ bf16|decoding" "$OUT/e2e_cols.log"
    ;;
sweep18)
    # 2026-12-06 (17th, ~4 min): every form and memory order at 4 and 8 warps a tile in the
    # coalesced column map for qkv, down and o at 1 and 8 rows, back to back
    for warps in 4 8; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, warps=$warps, columns='coalesced')" &
    done
    wait
    b col_sweep 400 python3 tools/gpu/nvfp4_launch_chain.py --sweep 4 8 --columns coalesced --shapes qkv down o --ms 1 8
    cat "$OUT/rc.txt"; grep -E "fastest|shipped" "$OUT/col_sweep.log"
    ;;
final18)
    # 2026-12-06 (17th, ~6 min): kernel: mma's GPU tests (every form in both column maps, the
    # dequantization's bits in both, the Qwen3-8B shapes in both) and the engine's NVFP4 tests
    # with the H100 file naming the coalesced map for qkv, down and o
    b final_tests 480 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py
    cat "$OUT/rc.txt"; tail -3 "$OUT/final_tests.log"
    ;;
bench18)
    # 2026-12-06 (17th, ~4 min): the GEMM table with the shipped file, then end to end with it
    # against the file before (every shape contiguous), one process, and a 2048-token prefill
    plan_without "$OUT/plan-contiguous.json" columns
    b gemm18 200 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 50 --ms 1 4 8 16
    b e2e18 300 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-prefill 2048 --e2e-plan - "$OUT/plan-contiguous.json"
    cat "$OUT/rc.txt"; grep -E "^(qkv|gate_up|down|o) " "$OUT/gemm18.log"; grep -E "prefill|/ bf16|decoding" "$OUT/e2e18.log"
    ;;
r16sweep18)
    # 2026-12-06 (17th, ~2 min): every 16-row launch at 16 rows, back to back: qkv, down and o in
    # the coalesced column map, gate_up in the contiguous one (as the H100 file names them)
    b r16_cols 240 python3 tools/gpu/nvfp4_launch_chain.py --sweep16 --columns coalesced --shapes qkv down o --ms 16
    b r16_gate 200 python3 tools/gpu/nvfp4_launch_chain.py --sweep16 --columns contiguous --shapes gate_up --ms 16
    cat "$OUT/rc.txt"; grep -h -E "fastest|shipped" "$OUT/r16_cols.log" "$OUT/r16_gate.log"
    ;;
r16final18)
    # 2026-12-06 (17th, ~3 min): the H100 file's new 16-row launches (one tile a warp in the
    # coalesced map): kernel: mma's Qwen3-8B-shape tests and the engine's, the GEMM table at 1 .. 16 rows
    b r16_tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py \
        -k "qwen3_8b or past_sixteen or kernel_mma or auto_runs"
    b gemm18b 200 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 50 --ms 1 4 8 12 16
    cat "$OUT/rc.txt"; tail -3 "$OUT/r16_tests.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/gemm18b.log"
    ;;
from18)
    # 2026-12-06 (17th, ~2 min): the 16-row launches taking 5 .. 16 rows: every one of them at 5,
    # 6 and 8 rows against the shipped launches (gate_up contiguous, the others coalesced)
    b from_gate 200 python3 tools/gpu/nvfp4_launch_chain.py --sweep16 --from-rows 5 --columns contiguous \
        --shapes gate_up --ms 5 6 8
    b from_cols 240 python3 tools/gpu/nvfp4_launch_chain.py --sweep16 --from-rows 5 --columns coalesced \
        --shapes qkv down o --ms 5 8
    cat "$OUT/rc.txt"; grep -h -E "fastest|shipped" "$OUT/from_gate.log" "$OUT/from_cols.log"
    ;;
trace19)
    # 2026-12-06 (18th, ~3 min): the GEMVs' warps' timelines (tools/gpu/nvfp4_trace.py, trace
    # builds): each shape's chain of copies as the GEMM table runs it, and the decode step's
    # qkv, o, gated gate_up, down; raw records in $OUT/trace
    b trace_same 200 python3 tools/gpu/nvfp4_trace.py --chain same --ms 1 8 16 --out "$OUT/trace"
    b trace_layer 120 python3 tools/gpu/nvfp4_trace.py --chain layer --ms 1 --out "$OUT/trace"
    cat "$OUT/rc.txt"; cat "$OUT/trace_same.log" "$OUT/trace_layer.log" | cut -c1-170 | tail -80
    ;;
spread19)
    # 2026-12-06 (18th, ~8 min): launches spread evenly over the multiprocessors (mma_gemv.MmaGemv
    # spread): kernel: mma's Qwen3-8B-shape tests with it, the GEMVs back to back with and
    # without, the decode step's four GEMVs traced with it, end to end with and without
    b spread_tests 150 env HINGE_NVFP4_MMA_SPREAD=1 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "qwen3_8b or past_sixteen"
    b spread_chain 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 4 8 16 --variants shipped spread
    HINGE_NVFP4_MMA_SPREAD=1 b spread_trace 100 python3 tools/gpu/nvfp4_trace.py --chain layer --ms 1
    HINGE_NVFP4_MMA_SPREAD=1 b spread_trace_same 100 python3 tools/gpu/nvfp4_trace.py --chain same --ms 1 \
        --shapes qkv down
    b spread_e2e 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-env - HINGE_NVFP4_MMA_SPREAD=1
    cat "$OUT/rc.txt"; tail -2 "$OUT/spread_tests.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/spread_chain.log"
    grep -E "layer M|same M|graph steady" "$OUT"/spread_trace*.log | cut -c1-220
    grep -E "/ bf16|decoding" "$OUT/spread_e2e.log"
    ;;
spread19b)
    # 2026-12-06 (18th, ~4 min): spread with the carveout left to the driver: its tests, the
    # GEMVs back to back, the decode step's GEMVs traced with down launched early behind the
    # gated GEMV, end to end: shipped, spread, spread + down early, down early
    b spread_tests 150 env HINGE_NVFP4_MMA_SPREAD=1 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "qwen3_8b or past_sixteen"
    b spread_chain 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 2 4 8 12 16 --variants shipped spread
    HINGE_NVFP4_MMA_SPREAD=1 HINGE_NVFP4_MMA_AFTER_GATED=early b spread_trace 100 \
        python3 tools/gpu/nvfp4_trace.py --chain layer --ms 1
    b spread_e2e 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-env - HINGE_NVFP4_MMA_SPREAD=1 \
        HINGE_NVFP4_MMA_SPREAD=1,HINGE_NVFP4_MMA_AFTER_GATED=early HINGE_NVFP4_MMA_AFTER_GATED=early
    cat "$OUT/rc.txt"; tail -2 "$OUT/spread_tests.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/spread_chain.log"
    grep -E "layer M|same M|graph steady" "$OUT"/spread_trace*.log | cut -c1-220
    grep -E "/ bf16|decoding" "$OUT/spread_e2e.log"
    ;;
final19)
    # 2026-12-06 (18th, ~5 min): the H100 file with every shape spread (and so down early behind
    # the gated GEMV): kernel: mma's GPU tests of the shapes, gating and early launches, the
    # engine's; the GEMM table at 1 .. 16 rows; end to end against the file without spread
    shipped_file final "qwen3_8b or past_sixteen or gated or early or auto_runs" 200 150 150 spread
    ;;
start19)
    # 2026-12-06 (18th, ~4 min): the next kernel let launch at a GEMV's start (trigger "start")
    # over the spread H100 file: the GEMVs back to back, end to end, the early-launch tests with it
    b start_chain 100 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 4 8 16 --variants shipped start
    b start_e2e 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-env - HINGE_NVFP4_MMA_TRIGGER=start
    HINGE_NVFP4_MMA_TRIGGER=start b start_tests 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py -k "early"
    cat "$OUT/rc.txt"; tail -2 "$OUT/start_tests.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/start_chain.log"
    grep -E "/ bf16|decoding" "$OUT/start_e2e.log"
    ;;
last19)
    # 2026-12-06 (18th, ~2 min, either card): the GEMVs back to back shipped, spread, spread with
    # the next kernel let launch at the GEMV's start; end to end the same three ways
    b last_chain 80 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped spread "spread start"
    b last_e2e 110 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-env - HINGE_NVFP4_MMA_SPREAD=1 \
        HINGE_NVFP4_MMA_SPREAD=1,HINGE_NVFP4_MMA_TRIGGER=start
    cat "$OUT/rc.txt"; head -1 "$OUT/last_chain.log"; grep -E "^(qkv|gate_up|down|o) " "$OUT/last_chain.log"
    grep -E "/ bf16|decoding" "$OUT/last_e2e.log"
    ;;
from19)
    # 2026-12-06 (18th, written for the next session, ~5 min): with launches spread, is the 8-row
    # kernel again the faster below 9 rows on down and gate_up (their 16-row kernels took over
    # from 2 and 6 rows when registers alone held those to their share)? The GEMM table at 1..8
    # rows with the shipped file, then with every "from" dropped (the 16-row kernels from 9 rows)
    plan_without "$OUT/plan-from9.json" r16.from
    b gemm_shipped 150 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --iters 50 --ms 1 2 4 6 8
    HINGE_NVFP4_MMA_PLAN="$OUT/plan-from9.json" b gemm_from9 150 python3 tools/gpu/nvfp4_gemm.py --skip-e2e \
        --iters 50 --ms 1 2 4 6 8
    cat "$OUT/rc.txt"; grep -E "^(gate_up|down) " "$OUT/gemm_shipped.log" "$OUT/gemm_from9.log"
    ;;
co20)
    # 2026-12-06 (19th, ~5 min): can the next GEMV's blocks sit beside this one's and copy its
    # weights before the wait? The shipped H100 file (spread, trigger "start") against trigger
    # "start" alone (every shape); rings of 8 (7 of a qkv or o warp's 8 supersteps
    # copied before the wait) with trigger "start", spread and not (4-warp shapes); CO_TRACE=1:
    # the warps' timelines of qkv with trigger "start" alone, rings of 8
    pdl_cubins 4 8
    b co_chain 100 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped "start alone"
    b co_deep 110 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --shapes qkv gate_up o --variants shipped \
        "deep start" "deep spread start" --keep-plans /tmp/plans
    if [ "${CO_TRACE:-0}" = 1 ]; then  # (the tilings file co_deep ran as "deep start")
        HINGE_NVFP4_MMA_PLAN=/tmp/plans/deep_start.json b co_trace_deep 100 python3 tools/gpu/nvfp4_trace.py \
            --chain same --ms 1 --shapes qkv
    fi
    cat "$OUT/rc.txt"; grep -E "^(qkv|gate_up|down|o) |^shape" "$OUT/co_chain.log" "$OUT/co_deep.log" | cut -d: -f2-
    if [ -f "$OUT/co_trace_deep.log" ]; then tail -14 "$OUT/co_trace_deep.log" | cut -c1-170; fi
    ;;
pdl21)
    # 2026-12-06 (20th, ~5 min): how fast the GEMV's memory side alone (the diagnostic ring form:
    # weights and x streamed as the plain form streams them, no MMAs) runs in the GEMM table's
    # chain, launched as the shipped file launches (spread, trigger "start"), with the trigger
    # after the weights are read, in rings of 8 (every copy of a qkv or o warp before
    # griddepcontrol.wait) spread and not, and without PDL; then the timelines of qkv in rings of
    # 8 spread (PDL_TRACE=0 skips them)
    NO_PDL=1 pdl_cubins 4 8
    b pdl_ring 120 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped ring "ring read"
    b pdl_deep 100 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 --shapes qkv gate_up o --variants shipped \
        "deep spread start" "ring deep" "ring deep alone" --keep-plans /tmp/plans
    HINGE_PDL=0 b pdl_off 80 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 --variants shipped ring
    if [ "${PDL_TRACE:-1}" = 1 ]; then  # (deep: the tilings file pdl_deep ran as "deep spread start")
        b pdl_trace_shipped 80 python3 tools/gpu/nvfp4_trace.py --chain same --ms 1 --shapes qkv
        HINGE_NVFP4_MMA_PLAN=/tmp/plans/deep_spread_start.json b pdl_trace_deep 80 python3 tools/gpu/nvfp4_trace.py \
            --chain same --ms 1 --shapes qkv
    fi
    cat "$OUT/rc.txt"
    grep -E "^(qkv|gate_up|down|o) |^shape" "$OUT/pdl_ring.log" "$OUT/pdl_deep.log" "$OUT/pdl_off.log" | cut -d: -f2-
    for f in "$OUT"/pdl_trace_*.log; do [ -f "$f" ] && { echo "== $f"; tail -12 "$f" | cut -c1-170; }; done
    true
    ;;
pdl21b)
    # 2026-12-06 (20th, ~4 min): finer pieces of work (K in 2 or 4 splits: shorter runs, more
    # blocks), the GEMV and its memory side alone, M = 1 and 8; then a plain read of each shape's
    # bytes (read_ceiling.py: Triton, no PDL, 2-16 KiB a program at best) on the same card
    pdl_cubins 4
    b split_chain 100 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped ring split2 "ring split2" \
        split4 "ring split4"
    b split_read 240 python3 tools/gpu/read_ceiling.py
    cat "$OUT/rc.txt"
    grep -E "^(qkv|gate_up|down|o) |^shape" "$OUT/split_chain.log" "$OUT/split_read.log" | cut -d: -f2-
    true
    ;;
h200x)
    # 2026-12-06 (19th, ~5 min, an H200 only): the H200 file as shipped (no spread), the H100
    # file (its coalesced columns, 16-row kernels, spread, trigger "start") and with H200_SPREAD=1
    # the H200 file spread with trigger "start": end to end, then the GEMM table of the H100 file
    only_h200 h200x
    PLAN_DEVICE="NVIDIA H200" plan_without "$OUT/h200-spread-start.json" spread=true 'trigger="start"'
    plan_without "$OUT/h100-file.json"
    b h200_e2e 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/h100-file.json" \
        ${H200_SPREAD:+"$OUT/h200-spread-start.json"}
    HINGE_NVFP4_MMA_PLAN="$OUT/h100-file.json" b gemm_h100-file 90 python3 tools/gpu/nvfp4_gemm.py --skip-e2e \
        --iters 50 --ms 1 2 4 8 16
    cat "$OUT/rc.txt"; grep -E "/ bf16|decoding" "$OUT/h200_e2e.log"
    for f in "$OUT"/gemm_*.log; do echo "== $f"; grep -E "^(qkv|gate_up|down|o) " "$f" | awk '{print $1, $3, $NF}' | tr '\n' ' '; echo; done
    ;;
wait25)
    # the H100 file with "row_scale": "wait" (shipped 2026-12-07, 24th, from its kernels' bits
    # test and two end-to-end runs): kernel: mma's Qwen3-8B-shape, early-launch and engine GPU
    # tests under it, the GEMM table at 1 .. 16 rows, end to end against the file without it (~5 min)
    pdl_cubins 4 & ROW_SCALE=wait pdl_cubins 4 & wait
    shipped_file wait "qwen3_8b or past_sixteen or kernel_mma or auto_runs or early" 240 150 200 row_scale
    ;;
last18)
    # 2026-12-06 (17th, ~3 min): the H100 file with gate_up's 16-row launch from 6 rows and
    # down's from 1: kernel: mma's Qwen3-8B-shape and engine tests, the GEMM table at 1 .. 16
    # rows, end to end against the file with every shape contiguous and no "from"
    shipped_file last "qwen3_8b or past_sixteen or kernel_mma or auto_runs" 200 120 200 columns r16.from
    ;;
kw17)
    # 2026-12-06 (16th, ~5 min): eight warps a tile (cubins of 8 warps a block): the per-form GPU
    # test with them, then the GEMVs back to back under the shipped tilings and kw8 variants
    # (tools/gpu/nvfp4_launch_chain.py; the variants' files in $OUT/plans)
    for warps in 4 8; do for pdl in True False; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=$pdl, warps=$warps)" &
    done; done
    for warps in 4 8; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, prefetch=256, warps=$warps)" &
    done
    wait
    b kw_chain 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --keep-plans "$OUT/plans"
    b kw_tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "every_form or pdl_gemv or launched_early"
    cat "$OUT/rc.txt"; cat "$OUT/kw_chain.log"; tail -3 "$OUT/kw_tests.log"
    ;;
sweep17)
    # 2026-12-06 (16th, ~2 min): every form and memory order at 4 and 8 warps a tile for qkv,
    # down and o at 1 and 8 rows, back to back as the engine calls them
    b kw_sweep 300 python3 tools/gpu/nvfp4_launch_chain.py --sweep 4 8 --shapes qkv down o --ms 1 8
    cat "$OUT/rc.txt"; grep -E "fastest|shipped" "$OUT/kw_sweep.log"
    ;;
e2e17)
    # 2026-12-06 (16th, ~4 min): the H100 tilings with down at eight warps a tile (shipped now)
    # against the file before (down at 4 warps a tile, bulk form) end to end in one process, and
    # kernel: mma's Qwen3-8B-shape GPU tests with the file
    PLAN_DEVICE="NVIDIA H100 80GB HBM3" plan_without "$OUT/plan-down-kw4.json" 4096x12288:kwarps=4 \
        '4096x12288:form="bulk"'
    b e2e_kw8 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-down-kw4.json"
    b e2e_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "qwen3_8b or past_sixteen"
    cat "$OUT/rc.txt"; grep -E "/ bf16|decoding" "$OUT/e2e_kw8.log"; tail -3 "$OUT/e2e_tests.log"
    ;;
ceil17)
    # 2026-12-06 (16th, ~6 min): what a plain read of each shape's NVFP4 bytes takes against
    # cuBLAS's bf16 GEMV of as many bytes and kernel: mma (tools/gpu/read_ceiling.py); kernel:
    # mma's and the engine's NVFP4 GPU tests at this tree (the 15th session's review left unrun)
    b ceil_read 300 python3 tools/gpu/read_ceiling.py
    b ceil_tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py
    cat "$OUT/rc.txt"; cat "$OUT/ceil_read.log"; tail -3 "$OUT/ceil_tests.log"
    ;;
ab14)
    # fa4's tail rules on one machine, batch 1 and 4, with and without the KV stored by the layer;
    # nvfp4 end to end with the new defaults (~2 min; ran 2026-12-06 on an H100 with the old
    # tail swapped in by hand, before split_tail existed)
    b fa4_split 150 python3 tools/gpu/fa4_split_decode.py --batch 1 4 --split-sizes 256 512 \
        --forms tile64 --kv-saved --tails short long
    b e2e_defaults 80 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; grep -E "copy|^\| (1|4) " "$OUT"/fa4_split.log; grep -H -E "/ bf16" "$OUT"/e2e_*.log
    ;;
b14)
    # the thirteenth session (2026-12-06)'s benchmarks (~8 min): fa4 batch-1 split decode by split size with
    # and without the KV stored by the layer; nvfp4 end to end with the rope kernel's KV write
    # and with each of two GEMV kinds launched late
    b fa4_split 120 python3 tools/gpu/fa4_split_decode.py --batch 1 4 --split-sizes 256 384 512 \
        --forms tile64 --kv-saved
    b e2e_default 80 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_rope_kv 80 env HINGE_ROPE_KV_WRITE=1 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_fa4_rope_kv 150 env HINGE_ROPE_KV_WRITE=1 python3 tools/gpu/nvfp4_gemm.py --skip-table \
        --e2e-kernel mma --attention fa4
    b e2e_late_qkv_proj 80 env HINGE_ROPE_KV_WRITE=1 HINGE_NVFP4_MMA_LATE=qkv_proj \
        python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; grep -E "^\| (1|4) " "$OUT/fa4_split.log"; grep -H -E "/ bf16" "$OUT"/e2e_*.log
    ;;
next13)
    # the thirteenth session's first call (~8 min): the gated GEMV's bits with the pair exchange
    # in the ring (not GPU-run yet), the rope kernel's KV write (tests, then end to end), and
    # which GEMVs should launch late; every e2e line is decode tokens/s nvfp4 vs bf16
    b mma_gated_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py plugins/quant_nvfp4/tests/test_end_to_end.py -k "gated or early"
    b rope_kv_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/layers/test_fast_triton.py tests/engine/test_rope_kv_write_gpu.py -k "kv_target or rope_kv"
    b e2e_default 80 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_rope_kv 80 env HINGE_ROPE_KV_WRITE=1 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    for late in qkv_proj gate_up_proj; do
        b "e2e_late_$late" 80 env HINGE_NVFP4_MMA_LATE="$late" python3 tools/gpu/nvfp4_gemm.py \
            --skip-table --e2e-kernel mma
    done
    cat "$OUT/rc.txt"; tail -2 "$OUT/mma_gated_tests.log"; tail -2 "$OUT/rope_kv_tests.log"
    grep -H -E "/ bf16" "$OUT"/e2e_*.log
    ;;
rope-kv)
    # next session: the rope kernel writing the KV (HINGE_ROPE_KV_WRITE=1): its GPU tests, then
    # end to end with and without it (~4 min)
    b rope_kv_tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/layers/test_fast_triton.py tests/engine/test_rope_kv_write_gpu.py -k "kv_target or rope_kv or graph"
    b e2e_rope_kv 100 env HINGE_ROPE_KV_WRITE=1 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_rope_kv_off 100 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    cat "$OUT/rc.txt"; tail -3 "$OUT/rope_kv_tests.log"; grep -H -E "/ bf16" "$OUT"/e2e_*.log
    ;;
launch-orders)
    # next session: which GEMVs gain by launching early (behind a norm, the attention's merge)
    # and which lose, as down behind the gated GEMV did; end to end each (~5 min)
    for late in "" qkv_proj o_proj gate_up_proj qkv_proj,o_proj,gate_up_proj; do
        b "e2e_late_${late:-none}" 100 env HINGE_NVFP4_MMA_LATE="$late" python3 tools/gpu/nvfp4_gemm.py \
            --skip-table --e2e-kernel mma
    done
    b e2e_pdl_off 100 env HINGE_PDL=0 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma
    b e2e_profile 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-profile
    cat "$OUT/rc.txt"; grep -H -E "/ bf16" "$OUT"/e2e_*.log
    grep -E "^nvfp4: batch|^none: batch" "$OUT/e2e_profile.log"
    ;;
gated-e2e)
    b nvfp4_e2e_gated 230 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-kernel mma --e2e-profile \
        --attention-options "${ATTN:-{\}}"
    b nvfp4_e2e_unfused 180 env HINGE_NVFP4_MMA_GATED=0 python3 tools/gpu/nvfp4_gemm.py --skip-table \
        --e2e-kernel mma --attention-options "${ATTN:-{\}}"
    cat "$OUT/rc.txt"; tail -3 "$OUT/nvfp4_e2e_gated.log"; tail -3 "$OUT/nvfp4_e2e_unfused.log"
    grep -E "^nvfp4: batch|^none: batch" "$OUT/nvfp4_e2e_gated.log"
    ;;
bench4)
    b fa4_split 90 python3 tools/gpu/fa4_split_decode.py --batch 1 --split-sizes 384 512 \
        --forms tile64 tile64-noolap tile64-nors
    b recurrent 60 python3 tools/gpu/recurrent_decode.py
    b hybrid 270 python3 tools/gpu/roofline.py --arch qwen3_5 --size 9b --modes default --skip-hf
    cat "$OUT/rc.txt"; grep -E "^\| 1 " "$OUT/fa4_split.log"; tail -10 "$OUT/recurrent.log"
    tail -4 "$OUT/hybrid.log"
    ;;
bench|bench2)
    if [ "$1" = bench ]; then
        b fa4_split 120 python3 tools/gpu/fa4_split_decode.py
        b roofline 330 python3 tools/gpu/roofline.py --arch qwen3 --size 8b --arch2 qwen3_5 --size2 9b --profile greedy sampled
        b fa4_prefill 150 python3 tools/gpu/fa4_prefill_bench.py
        b prefill_host 120 python3 tools/gpu/prefill_host.py
    else
        b fa4 100 python3 tools/gpu/fa4_attention.py
        b recurrent 90 python3 tools/gpu/recurrent_decode.py --sweep
        b nvfp4 420 python3 tools/gpu/nvfp4_gemm.py --sweep
        b sync 90 python3 tools/gpu/sync_points.py
        b roofline_split 150 python3 tools/gpu/roofline.py --arch qwen3 --size 8b --modes default \
            --skip-hf --attention-options '{"decode_split_kv": "auto"}'
        ncu=$(ncu_exe)
        for spec in "nvfp4 gate_up" "nvfp4 qkv" "bf16 o"; do
            # shellcheck disable=SC2086
            b "ncu-${spec// /-}" 60 "$ncu" --clock-control none --kernel-name regex:gemv_kernel \
                --launch-skip 3 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
                --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
                --section LaunchStats --section Occupancy python3 tools/gpu/ncu_gemv.py $spec
        done
    fi
    cat "$OUT/rc.txt"
    ;;
whole31)
    # 2026-12-07 (31st, either card, mini site, ~4 min): rings of 9, every superstep of a qkv or
    # o warp copied before griddepcontrol.wait (rings of 8 copy 7 of 8, the last a round trip
    # after it), unspread and spread, the GEMV and its memory side alone, against rings of 4 and
    # 8; the trace of qkv's calls under rings of 9; the PDL read of qkv's and o's bytes
    ROW_SCALE=wait pdl_cubins 4 8 9 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b whole_chain 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --shapes qkv o --variants shipped \
        ring "deep start" "ring deep alone" "whole start" "ring whole" "whole spread" "ring whole spread" \
        --keep-plans "$OUT/plans"
    b whole_trace_shipped 80 python3 tools/gpu/nvfp4_trace.py --chain same --ms 1 --shapes qkv
    HINGE_NVFP4_MMA_PLAN="$OUT/plans/whole_start.json" b whole_trace 80 python3 tools/gpu/nvfp4_trace.py \
        --chain same --ms 1 --shapes qkv
    b whole_read 100 python3 tools/gpu/read_ceiling.py --reads pdl --shapes qkv o --iters 20
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/whole_chain.log"
    for f in "$OUT"/whole_trace*.log; do echo "== $f"; tail -12 "$f" | cut -c1-170; done
    grep -E "^(qkv|o) |^shape" "$OUT/whole_read.log"
    ;;
down31)
    # 2026-12-07 (31st, either card, mini site, ~1 min): down's launches of up to 8 rows in the
    # bulk form (shipped since) against the plain (shipped before) and rings of 3; gate_up beside
    ROW_SCALE=wait pdl_cubins 3 4 > "$OUT/cubins.log" 2>&1
    b down_chain 150 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --shapes down gate_up \
        --variants shipped "shallow 3" "kw8 plain" "kw8 bulk" ring
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/down_chain.log"
    ;;
r16d33)
    # 2026-12-07 (33rd, either card, mini site, ~3 min): what a 16-row launch costs over an 8-row
    # one: the second set's x never loaded, or its MMAs not issued (mma_gemv R16_DIAGS), at 16
    # rows, against shipped at 8 and 16 (the 12-row launch already costs what 16 do)
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b r16_diag 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 8 12 16 --variants shipped "r16 x once" "r16 one set"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/r16_diag.log"
    ;;
xpf33)
    # 2026-12-07 (33rd, ran at tree 0dbe7a1: its "xpf" variants and build_cubin's x_prefetch
    # were removed after it, slower on every shape; check that tree out to rerun it; either
    # card, mini site, ~4 min): the gc freeze GPU test (its thaw checked
    # against what CPython 3.12 keeps frozen of its own), then x's lines asked into L1 one or two
    # supersteps ahead (r16d33: x's loads are most of what 16 rows cost over 8)
    b gc_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/engine/test_gc_freeze.py
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    b xpf 300 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "xpf 1" "xpf 2"
    cat "$OUT/rc.txt"; tail -1 "$OUT/gc_tests.log"; grep -v "^ " "$OUT/xpf.log"
    ;;
*)
    echo "no lane '${1:-}': open_issue_checks.sh has the live ones; closed_lanes.sh has: r16d33 xpf33 whole31 down31 followup bench5 bench6 bench7 bench8 bench9 bench10 bench11 bench12 gated-tests gated-attn gated-ab gated-mlp gated-final t14 p15 t22 b22 e22 r22 trace22 l2run22 wait23 early23 shallow23 early24 w22 t15 r16 b16 c16 n16 t2 next15 next16 bench16 dq16 host16 col18 e2e18 sweep18 final18 bench18 r16sweep18 r16final18 from18 trace19 spread19 spread19b final19 start19 last19 from19 co20 pdl21 pdl21b h200x wait25 last18 kw17 sweep17 e2e17 ceil17 ab14 b14 next13 rope-kv launch-orders gated-e2e bench4 bench|bench2" >&2
    exit 2
    ;;
esac
