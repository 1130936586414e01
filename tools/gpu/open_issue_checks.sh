#!/usr/bin/env bash
# The GPU checks still open on issues 12 and 14, each one device call of under 10 minutes (run
# from the repository root after the gpu-host pack is installed and sourced, and
# `python3 -m pip install -q -e . --no-deps --no-build-isolation`):
#
#   bash tools/gpu/open_issue_checks.sh early28  # fa4 launched early: its GPU tests, issue 14's
#                                                 # benchmark with a plain-launch row, the prefill
#                                                 # through hinge bench (either card, ~2.5 min)
#   bash tools/gpu/open_issue_checks.sh suite28  # then every fa4 GPU test, and the NVFP4 GEMVs back
#                                                 # to back under the H100 file and the H200's old one
#   bash tools/gpu/open_issue_checks.sh merge27  # an H200 only: fa4 batch 1, the merge's tests, NVFP4
#                                                 # tilings candidates end to end, ncu, timelines
#   bash tools/gpu/open_issue_checks.sh l1w26    # an H100: ncu L1 counters of qkv at 1 / 8 / 16 rows,
#                                                 # down at 8, gate_up at 1 and 8 (~4 min)
#   bash tools/gpu/open_issue_checks.sh x16s29   # 16 rows: K in splits, one warp a tile (x shared a block)
#   bash tools/gpu/open_issue_checks.sh least29  # spread launches padded the least: chain, ncu of qkv at 16
#   bash tools/gpu/open_issue_checks.sh ship29   # then the files with it: GPU tests, GEMM table, end to end
#   bash tools/gpu/open_issue_checks.sh h200y    # an H200 only (whole pack): issue 14's benchmark,
#                                                 # fa4's batch-1 layer with the KV stored; NVFP4 end
#                                                 # to end and back to back; the PDL read (~6 min)
#   bash tools/gpu/open_issue_checks.sh lay31    # the memory side alone in each memory order (~2 min)
#   bash tools/gpu/open_issue_checks.sh sweep31  # every form and order, 1-8 warps a tile, now (~4 min)
#   bash tools/gpu/open_issue_checks.sh e2e31    # end to end, down bulk (shipped) against plain (~5 min)
#   bash tools/gpu/open_issue_checks.sh few32    # one row in the xring form: chain, tests, end to end
#   bash tools/gpu/open_issue_checks.sh gc32     # the start-up heap frozen: GPU tests, end to end
#   bash tools/gpu/open_issue_checks.sh few32b   # ... in rings of 3 or 2, spread otherwise, trigger read
#   bash tools/gpu/open_issue_checks.sh r16r33   # 16 rows held to fewer registers (x once's confound)
#   bash tools/gpu/open_issue_checks.sh r16f34   # no wait (what the wait costs), r16r33, few32b's chain (~8 min)
#   bash tools/gpu/open_issue_checks.sh h200c    # an H200 only: the GEMVs back to back, shipped (~2 min)
#   bash tools/gpu/open_issue_checks.sh ring34   # the GEMV, no wait, memory side alone, both; x once (~6 min)
#   bash tools/gpu/open_issue_checks.sh xsame34  # x once against x from the same pieces (~3 min)
#   bash tools/gpu/open_issue_checks.sh h200b34  # an H200 only: h200c, then h200n (~6 min)
#   bash tools/gpu/open_issue_checks.sh wg35     # the wgmma forms: their GPU tests, then back to
#                                                 # back against shipped at 1, 8, 16 rows (~7 min)
#   bash tools/gpu/open_issue_checks.sh wgx35    # what x costs the wgmma form (x once, x same; ran
#                                                 # out of time after qkv); wgx35b: the rest (~4 min)
#   bash tools/gpu/open_issue_checks.sh wgn36    # the natural build's wgmma forms (x copied as it
#                                                 # lies, by cp.async or TMA; K shared by warpgroups):
#                                                 # the tracer, then GPU tests (~8 min); wgn36c:
#                                                 # back to back at 1, 8, 16 rows (~5 min), the
#                                                 # variants' files kept in $OUT/plans; wgn36v:
#                                                 # PLAN=<file> against shipped, the GEMM table at
#                                                 # 1, 4, 16 and end to end (~5 min); none run yet
#   bash tools/gpu/open_issue_checks.sh h200n    # h200y's NVFP4 half alone (mini site); h200m: and
#                                                 # the PDL read of each shape
#   bash tools/gpu/open_issue_checks.sh tests    # GPU tests: one engine lane, two kernel lanes;
#                                                 # tests12: its first two lanes without the sync test
#   bash tools/gpu/open_issue_checks.sh verify   # a short session's check: the warm-up and sync
#                                                 # tests, then every other GPU test; verify-bench:
#                                                 # rooflines, GEMV tilings, fa4 benchmarks
#
# Every other lane (the measured-and-closed experiments whose commands docs/benchmarks.md,
# docs/gpu-results.md and docs/nvfp4.md quote by name) is in tools/gpu/closed_lanes.sh; this
# script hands an unknown name to it, so `open_issue_checks.sh <name>` runs any of them.
#
# Engine tests share one lane: each engine sizes its KV pool from the free memory it sees, so two
# engines starting at once on one card miscount each other's allocations (docs/gpu-results.md).
# Logs: $OUT/lanes.tgz and $OUT/lanes-summary.txt (tests), $OUT/<name>.log and JSON (bench).
. "$(dirname "$0")/lane_helpers.sh"
case "${1:-}" in
tests|tests12)
    # tests12: the first two lanes without the sync test (it and the NVFP4 lane passed at e2b0aa7,
    # eighth session; the engine lane is ~8 min without it), and the kernel=mma GPU test
    syncs=tests/engine/test_decode_syncs_gpu.py, third=plugins/quant_nvfp4/tests
    [ "$1" = tests12 ] && syncs="" && third=plugins/quant_nvfp4/tests/test_mma_kernel.py
    LIMIT=${LIMIT:-240} bash tools/gpu/lanes.sh \
        "tests/hybrid/test_radix_gpu.py,tests/hybrid/test_gpu_kernels.py,tests/engine/test_warmup_gpu.py,tests/engine/test_gc_freeze.py,${syncs}tests/engine/test_graphs_gpu.py,tests/engine/test_kv_pool.py,tests/hybrid/test_deterministic_delta_rule_gpu.py,plugins/attn_fa4/tests/test_fa4_gpu.py::test_tiny_models_generate_with_fa4_what_they_generate_with_flashinfer" \
        "plugins/attn_fa4/tests/test_fa4_gpu.py --deselect plugins/attn_fa4/tests/test_fa4_gpu.py::test_tiny_models_generate_with_fa4_what_they_generate_with_flashinfer,tests/engine/test_sampler_topk_path_gpu.py,tests/engine/test_sampler_batch_invariance_gpu.py,tests/engine/test_penalty_kernel.py,tests/builtin/test_flashinfer_gpu.py::TestFlashInferWithoutDecodeSplit,tests/hybrid/test_decode_in_pool_gpu.py,tests/hybrid/test_conv_in_pool_gpu.py,tests/layers/test_fast_triton.py,tests/layers/test_fast_triton_hybrid.py,tests/layers/test_kv_write.py,tests/layers/test_fast_triton_invariance_gpu.py,tests/models/test_dense_gpu.py" \
        "$third"
    ;;
verify)
    # NOTE: "the rest" = every GPU test not named in the `tests` lanes, split by directory
    # (tests/server needs the openai package, absent there; tests/hybrid all ran at 80e799d)
    LIMIT=${LIMIT:-240} bash tools/gpu/lanes.sh \
        "tests/engine/test_warmup_gpu.py,tests/engine/test_decode_syncs_gpu.py,tests/engine tests/integration tests/models tests/bench tests/test_llm.py tests/testing tests/plugins --ignore=tests/server --ignore=tests/engine/test_warmup_gpu.py --ignore=tests/engine/test_decode_syncs_gpu.py --ignore=tests/engine/test_graphs_gpu.py --ignore=tests/engine/test_kv_pool.py --ignore=tests/engine/test_sampler_topk_path_gpu.py --ignore=tests/engine/test_sampler_batch_invariance_gpu.py --ignore=tests/models/test_dense_gpu.py" \
        "plugins/quant_nvfp4/tests/test_triton_gemv.py" \
        "plugins/quant_nvfp4/tests --ignore=plugins/quant_nvfp4/tests/test_triton_gemv.py" \
        "tests/builtin" \
        "tests/test_devices.py,tests/layers --ignore=tests/layers/test_fast_triton.py --ignore=tests/layers/test_fast_triton_hybrid.py --ignore=tests/layers/test_kv_write.py --ignore=tests/layers/test_fast_triton_invariance_gpu.py,plugins/attn_fa4/tests plugins/cache_radix/tests --ignore=plugins/attn_fa4/tests/test_fa4_gpu.py"
    ;;
verify-bench)
    # (flashinfer's decode_split_kv is auto by default since 2026-12-02: this run measured it)
    b roofline_default 150 python3 tools/gpu/roofline.py --arch qwen3 --size 8b --modes default --skip-hf
    b nvfp4_quick 120 python3 tools/gpu/nvfp4_gemm.py --skip-table --sweep --quick --sweep-m 1 \
        --shapes gate_up qkv --skip-e2e
    # the tensor-core GEMV experiment (tools/kernels/nvfp4_mma_gemv.cu): correct? how fast at M <= 8?
    b nvfp4_mma 120 python3 tools/gpu/nvfp4_mma_probe.py
    b fa4 60 python3 tools/gpu/fa4_attention.py
    # default mode may take a faster in-pool tiling than the deterministic kernel's (8 columns,
    # 1 warp; 63-65% of copy at batch 64): the sweep says which
    b recurrent 90 python3 tools/gpu/recurrent_decode.py --sweep
    b fa4_prefill 150 python3 tools/gpu/fa4_prefill_bench.py
    # the hybrid's TTFT with short prefills on the token-recurrence kernel (fla_kernels docstring)
    # against fla's chunk pipeline, one after the other on one machine
    b hybrid_fla 150 python3 tools/gpu/roofline.py --arch qwen3_5 --size 9b --modes default --skip-hf
    b hybrid_token_recurrence 150 env HINGE_TOKEN_RECURRENCE_MAX=512 python3 tools/gpu/roofline.py \
        --arch qwen3_5 --size 9b --modes default --skip-hf
    cat "$OUT/rc.txt"; tail -8 "$OUT/roofline_default.log"; grep -E "^  best" "$OUT/nvfp4_quick.log"; tail -18 "$OUT/nvfp4_mma.log"
    grep -E "b1 x|decode \| hinge fa4, split auto" "$OUT/fa4.log" | head -3; tail -6 "$OUT/fa4_prefill.log"
    tail -3 "$OUT/hybrid_fla.log"; tail -3 "$OUT/hybrid_token_recurrence.log"; tail -8 "$OUT/recurrent.log"
    ;;
early28)
    # 2026-12-07 (28th, either card, the whole pack, ~6 min): fa4's forward launched early
    # (hinge_fa4.early, CPU-tested only): its GPU tests (bits equal to the plain launch; a call
    # right after a late-writing kernel reads what it wrote; without the waits it does not),
    # issue 14's benchmark at batch 1 and 16 (with a plain-launch row: the A/B in one run), the
    # prefill through hinge bench (NO_PREFILL=1 skips it); lane
    # suite28 next, on the same machine: every fa4 GPU test (early launch is the default)
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b early_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/attn_fa4/tests/test_early_gpu.py
    tail -4 "$OUT/early_tests.log"
    b fa4 240 python3 tools/gpu/fa4_attention.py --batch 1 16 --split-sizes 384 512
    grep -E "copy|prefill|decode|warn|early" "$OUT/fa4.log" | head -30
    [ -n "${NO_PREFILL:-}" ] || b fa4_prefill 170 python3 tools/gpu/fa4_prefill_bench.py
    cat "$OUT/rc.txt"; tail -6 "$OUT/fa4_prefill.log" 2>/dev/null
    ;;
suite28)
    # 2026-12-07 (28th, after early28 on the same machine, ~8 min): every fa4 GPU test with the
    # early launch on (the default on sm_90), while the GEMV cubins build; then the GEMVs back to
    # back on this card under the H100 file (shipped as the H200's) and the H200's old file
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    ( pdl_cubins 4 8 & ROW_SCALE=wait pdl_cubins 4 8 & wait ) > "$OUT/cubins.log" 2>&1 &
    b fa4_suite 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs plugins/attn_fa4/tests
    tail -3 "$OUT/fa4_suite.log"; wait
    h100=plugins/quant_nvfp4/hinge_nvfp4/tuned/NVIDIA_H100_80GB_HBM3.json
    old_h200_plan "$OUT/plan-old.json"
    b chain_h100 80 env HINGE_NVFP4_MMA_PLAN="$h100" python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped
    b chain_old 80 env HINGE_NVFP4_MMA_PLAN="$OUT/plan-old.json" python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped
    cat "$OUT/rc.txt"
    paste "$OUT/chain_h100.log" "$OUT/chain_old.log" | grep steady | awk '{print $1,$2,"h100-file",$5,$7,"old-h200-file",$12,$14}'
    ;;
merge27)
    # 2026-12-07 (27th, an H200 only, the whole pack, ~6-9 min): issue 14's benchmark at batch 1
    # with the merge reading its part count before its wait (CPU-tested only), the merge's GPU
    # tests; then H200 tilings candidates: the GEMVs back to back under the H100 file (the H200's
    # since this session) and the H200's old one (launch_chain now honours $HINGE_NVFP4_MMA_PLAN),
    # end to end under the shipped file ("-"), the old one, the H100 file with gate_up interleaved,
    # the old file with the H100 file's launch keys, the H100 file with the old gate_up entry
    # (row_scale wait); ncu of down at 8 and 1 rows (clocks, L1)
    only_h200 merge27
    h100=plugins/quant_nvfp4/hinge_nvfp4/tuned/NVIDIA_H100_80GB_HBM3.json
    old_h200_plan "$OUT/plan-old.json"
    python3 - "$OUT" <<'PY'
import copy, json, sys
h100 = json.load(open("plugins/quant_nvfp4/hinge_nvfp4/tuned/NVIDIA_H100_80GB_HBM3.json"))
old = json.load(open(f"{sys.argv[1]}/plan-old.json"))
b = copy.deepcopy(h100); b["24576x4096"]["layout"] = "interleaved"
c = copy.deepcopy(old)
for e in c.values():
    e.update(spread=True, trigger="start", row_scale="wait")
d = copy.deepcopy(h100); d["24576x4096"] = dict(old["24576x4096"], row_scale="wait")
for name, plan in (("B", b), ("C", c), ("D", d)):
    json.dump(plan, open(f"{sys.argv[1]}/plan-{name}.json", "w"), indent=1)
PY
    ( pdl_cubins 4 8 & ROW_SCALE=wait pdl_cubins 4 8 & wait ) > "$OUT/cubins.log" 2>&1 &
    b fa4 120 python3 tools/gpu/fa4_attention.py --batch 1
    grep -E "copy|decode" "$OUT/fa4.log"
    b merge_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/attn_fa4/tests/test_fa4_gpu.py -k "merge or three or captured"
    tail -2 "$OUT/merge_tests.log"; wait
    b chain_h100 60 env HINGE_NVFP4_MMA_PLAN="$h100" python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped
    b chain_old 60 env HINGE_NVFP4_MMA_PLAN="$OUT/plan-old.json" python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped
    paste "$OUT/chain_h100.log" "$OUT/chain_old.log" | grep steady | awk '{print $1,$2,"h100-file",$5,$7,"old-h200-file",$12,$14}'
    b e2e 150 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-old.json" "$OUT/plan-B.json" "$OUT/plan-C.json" "$OUT/plan-D.json"
    grep -E "/ bf16|decoding" "$OUT/e2e.log"; cat "$OUT/rc.txt"
    for m in 8 1; do ncu_l1 "" down $m; done; ncu_l1_table
    # where a call's time goes on this card (the H100: wait ~1.0 us, superstep 0 at 1.1, period
    # 7.1 on qkv; docs/nvfp4.md, twenty-second session): the shipped file's timelines at M = 1
    b trace_h200 150 python3 tools/gpu/nvfp4_trace.py --shapes qkv down o
    tail -30 "$OUT/trace_h200.log"
    ;;
l1w26)
    # what each load costs L1 at 1, 8 and 16 rows (Nsight Compute, eager launches, ~4 min): the
    # L1 data pipe's wavefronts, global and shared, against the requests and sectors of x's
    # loads and the ring's copies; the L1 sub-units' busy %; uncoalesced-access rules. Decides
    # whether x staged once a block and read with ldmatrix (1 wavefront a 128 bytes) would
    # take fewer wavefronts than x's own loads (8 rows' 64 bytes a load)
    IFS=, read -ra runs <<< "${L1_RUNS:-qkv 1,qkv 8,qkv 16,down 8,gate_up 1,gate_up 8}"
    for run in "${runs[@]}"; do ncu_l1 "" $run; done  # L1_RUNS: "shape rows,..." instead
    cat "$OUT/rc.txt"; ncu_l1_table
    ;;
x16s29)
    # 2026-12-07 (29th, an H100 or H200, mini site, ~4 min): at 16 rows each SM reads all of x
    # (qkv: 31.6 MB of L1 misses for 14.2 MB of weights, ncu l1w26), its L1 ~28 KiB beside the
    # spread launches' padding. K in splits with one warp a tile: a block's tiles share one
    # split's x. The GEMVs back to back at 16 rows, the shipped file against those variants
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b chain16 400 python3 tools/gpu/nvfp4_launch_chain.py --ms 16 --variants shipped "x16 k2 kw1" \
        "x16 k4 kw1" "x16 k2 kw1 t2" "x16 k4 kw1 t2" "x16 k8 kw1 t2" "x16 k4 kw2 t2" "x16 k4 kw1 t2 bulk"
    cat "$OUT/rc.txt"; cat "$OUT/chain16.log"
    ;;
least29)
    # 2026-12-07 (29th, either card, mini site, ~3 min): spread launches padded the least
    # (mma_gemv.spread_blocks_bytes least): qkv's 16-row blocks asked 58 KiB of unused shared
    # memory each, 3 x 77 KiB a multiprocessor, so L1 kept ~28 KiB for x's 128 KiB (45% of x's
    # sectors missed L1, ncu l1w26). The GEMVs back to back, shipped against padded the least;
    # then ncu of qkv at 16 rows under each: the shared memory configuration and L1's hits
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b chain_least 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "spread least" \
        --keep-plans "$OUT/plans"
    ncu=$(ncu_exe); metrics="launch__shared_mem_config_size,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,gpu__time_duration.sum,regex:^l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_(hit|miss)\.sum$,lts__t_sectors_srcunit_tex_op_read.sum"
    for plan in shipped least; do
        [ $plan = least ] && export HINGE_NVFP4_MMA_PLAN="$OUT/plans/spread_least.json"
        b "ncu_$plan" 100 "$ncu" --clock-control none --kernel-name regex:nvfp4_mma_gemv --launch-skip 3 \
            --launch-count 1 --metrics "$metrics" python3 tools/gpu/ncu_gemv.py mma qkv --m 16
    done
    unset HINGE_NVFP4_MMA_PLAN
    cat "$OUT/rc.txt"; cat "$OUT/chain_least.log"
    grep -h -E "launch__|gpu__time|lookup|lts__" "$OUT"/ncu_shipped.log "$OUT"/ncu_least.log | sed 's/  */ /g'
    ;;
ship29)
    # 2026-12-07 (29th, either card, mini site, ~8 min): the tilings files with spread "least"
    # (least29: gate_up at 8 rows 24.7 -> 23.3 us, the rest within 0.1 us): kernel: mma's GPU
    # tests of it, the Qwen3-8B shapes and the engine; the GEMM table at 1 .. 16 rows; end to
    # end against the file with spread true
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    shipped_file least "least or qwen3_8b or past_sixteen or auto_runs" 150 120 200 "spread=true"
    ;;
h200y)
    # 2026-12-06 (21st, an H200 only, the whole pack): the two goals measured on an H100 that
    # the H200 decides: fa4's batch-1 decode share of copy (issue 14's benchmark, then the
    # engine's path: the KV stored by the rope kernel); NVFP4 end to end with the defaults, the
    # GEMVs back to back under the H200's tilings file and the H100's, the PDL read of each shape
    # (the register form, once here, was refuted on the H100: docs/nvfp4.md, twenty-second session)
    only_h200 h200y
    b fa4 150 python3 tools/gpu/fa4_attention.py
    b fa4_split 100 python3 tools/gpu/fa4_split_decode.py --batch 1 --split-sizes 384 512 --forms tile64 --kv-saved
    grep -E "copy|decode .*batch 1 " "$OUT/fa4.log"; grep -E "^\| 1 " "$OUT/fa4_split.log"
    nvfp4_both_files
    b ceil_pdl 150 python3 tools/gpu/read_ceiling.py --reads plain pdl pdl-wait-first --iters 20
    cat "$OUT/rc.txt"; cat "$OUT/ceil_pdl.log"
    ;;
lay31)
    # 2026-12-07 (31st, either card, mini site, ~2 min): the memory side alone in each memory
    # order of the weights, 1 and 8 rows, every shape (the PDL read's contiguous runs reach 88%
    # on qkv, the shipped order's memory side 71%: whole31)
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b lay_chain 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped ring "ring tile" \
        "ring super" "ring interleaved"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/lay_chain.log"
    ;;
sweep31)
    # 2026-12-07 (31st; run in the 32nd, docs/benchmarks.md; either card, mini site, ~4 min): every form and memory
    # order at 1, 2, 4 and 8 warps a tile under the current launch settings, 1 and 8 rows (the
    # forms were last swept in the seventeenth session, before spread, the start trigger and
    # row_scale after the wait; down's bulk form was 0.7-1.1 us faster in the thirty-first)
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b sweep 400 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --sweep 1 2 4 8
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/sweep.log"
    ;;
e2e31)
    # 2026-12-07 (31st; run in the 32nd, docs/benchmarks.md; either card, mini site, ~5 min): end to end with down's
    # 1-8-row launches in the bulk form (the shipped file since cc9fc09) against the plain form
    # (the file before), and the GEMV's GPU tests of the shipped file
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    plan_without "$OUT/plan-plain-down.json" '4096x12288:form="plain"'
    b e2e_down 250 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$OUT/plan-plain-down.json"
    b down_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        plugins/quant_nvfp4/tests/test_mma_kernel.py -k "qwen3_8b or every_form or least"
    cat "$OUT/rc.txt"; grep -E "/ bf16|decoding" "$OUT/e2e_down.log"; tail -2 "$OUT/down_tests.log"
    ;;
few32)
    # 2026-12-07 (32nd, either card, mini site, ~6 min): qkv's and down's one-row launches in
    # the xring form (the H100 file's "few" since this session; sweep31 had them fastest there):
    # up to 1, 2 or 4 rows against none; the GPU tests, GEMM table and end to end of the file
    # against it without "few"
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b few_chain 120 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 2 4 8 --shapes qkv down o \
        --variants shipped "no few" "few xring 2" "few xring 4"
    shipped_file few32 "qwen3_8b or fewest" 150 90 250 few
    grep -v "^ " "$OUT/few_chain.log"
    ;;
gc32)
    # 2026-12-07 (32nd, written, not run; either card, mini site, ~3 min): the start-up heap
    # frozen on CUDA (hinge.engine.gc_freeze): its GPU test, then end to end, the shipped file
    # twice (does the whole-generate rate hold steady now? the stepped run's slowest steps printed)
    b gc_tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/engine/test_gc_freeze.py
    b gc_e2e 150 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - -
    cat "$OUT/rc.txt"; tail -2 "$OUT/gc_tests.log"; grep -E "/ bf16|decoding" "$OUT/gc_e2e.log"
    ;;
few32b)
    # 2026-12-07 (32nd, written, not run: the session's device time ran out; either card, mini
    # site, ~5 min): the one-row launch in the xring form in
    # rings of 3 or 2, spread otherwise, or triggering after the read ("few" names them since
    # this session), 1 and 2 rows; end to end with and without "few", twice each, in turn, each
    # with its decode step's kernels profiled (where the chain's 1 us a layer went)
    # (nvfp4_gemm.py prints each run's slowest decode steps since: the whole generate's rate
    # ranged 277-352 tokens/s with decoding at 367-369 in few32's runs)
    ROW_SCALE=wait pdl_cubins 4 3 2 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b few_knobs 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 2 --shapes qkv down o --variants shipped \
        "no few" "few xring s3" "few xring s2" "few xring spread" "few xring unspread" "few xring read"
    plan_without "$OUT/plan-nofew.json" few
    b e2e_few 240 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-profile --e2e-plan - "$OUT/plan-nofew.json" \
        - "$OUT/plan-nofew.json"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/few_knobs.log"; grep -E "/ bf16|decoding|nvfp4_mma" "$OUT/e2e_few.log"
    ;;
r16r33)
    # 2026-12-07 (33rd, written, not run: no machine for it; either card, mini site, ~3 min):
    # x once's gain (r16d33) against its registers: the 16-row kernels held to 102 or 80
    # registers (budgeted for 20 or 24 warps a multiprocessor; x once takes 80-96 where shipped
    # takes 117-124 on these three shapes' launches), at 16 rows. gate_up's two-tiles kernels
    # keep their own budget (BLOCKS_PER_SM_16_T2): not in it
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b r16_regs 170 python3 tools/gpu/nvfp4_launch_chain.py --ms 16 --shapes qkv down o --variants shipped "r16 regs 20" "r16 regs 24"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/r16_regs.log"
    ;;
r16f34)
    # 2026-12-07 (34th; either card, mini site, ~8 min): every launch never waiting for the one
    # before ("no wait": the ceiling of any handoff faster than the grid's end), then r16r33,
    # then few32b's chain (its end to end left out)
    ROW_SCALE=wait pdl_cubins 4 3 2 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b no_wait 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "no wait"
    grep -v "^ " "$OUT/no_wait.log"
    b r16_regs 170 python3 tools/gpu/nvfp4_launch_chain.py --ms 16 --shapes qkv down o --variants shipped "r16 regs 20" "r16 regs 24"
    grep -v "^ " "$OUT/r16_regs.log"
    b few_knobs 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 2 --shapes qkv down o --variants shipped \
        "no few" "few xring s3" "few xring s2" "few xring spread" "few xring unspread" "few xring read"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/few_knobs.log"
    ;;
ring34)
    # 2026-12-07 (34th; either card, mini site, ~6 min): each launch's time taken apart at 1 and
    # 8 rows: the GEMV, without its wait, its memory side alone, and that without the wait
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b ring_no_wait 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 --variants shipped "no wait" ring "ring no wait"
    grep -v "^ " "$OUT/ring_no_wait.log"
    # ... and x loaded for a warp's first superstep only: what x's loads cost (~3 min more)
    b x_once 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "x once" "x once no wait" \
        "ring x once no wait"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/x_once.log"
    ;;
xsame34)
    # 2026-12-07 (34th; either card, mini site, ~3 min): x's cost at 8 and 16 rows taken apart:
    # x loaded once (no x traffic) against x loaded every superstep from the same pieces (its
    # L1 work, no L2 traffic past the first)
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b x_same 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 8 16 --variants shipped "x once" "x same"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/x_same.log"
    ;;
wg35)
    # 2026-12-08 (35th; either card, mini site, ~7 min): the wgmma forms (x loaded once a block
    # into shared memory, wgmma's B): their GPU tests, then (unless those hung) back to back
    # against shipped, in as many warps as shipped and twice as many, plain and bulk copies;
    # their cubins built first, at once
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1 &
    for cols in contiguous coalesced; do
        for pdl in False True; do
            python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=$pdl, columns='$cols', wg=True)" &
        done
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, columns='$cols', trigger='start', row_scale='wait', wg=True)" &
    done
    wait
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b wg_tests 170 python3 -m pytest -q -p no:cacheprovider plugins/quant_nvfp4/tests/test_mma_wgmma.py
    tail -15 "$OUT/wg_tests.log"
    grep -q "wg_tests rc=124" "$OUT/rc.txt" ||
        b wg_chain 330 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped wg "wg bulk" "wg k2" "wg bulk k2"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/wg_chain.log"
    ;;
wgn36|wgn36c)
    # 2026-12-08 (36th, written, not run; either card, mini site): the natural build's wgmma
    # forms (x copied into the warpgroup's stages as it lies, beside the weights, by every
    # thread's cp.async or by TMA; K shared by 2 or 4 warpgroups a block). wgn36 (~7 min): their
    # GPU tests and the natural dequantization's; wgn36c (~5 min, the same warm machine or not):
    # back to back against shipped and the register-staged wg. Cubins built first (cached after)
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1 &
    for pdl in False True; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=$pdl, columns='natural', wg=True)" &
    done
    for cols in contiguous coalesced natural; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, columns='$cols', trigger='start', row_scale='wait', wg=True)" &
    done
    wait
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    if [ "$1" = wgn36 ]; then
        # the tracer first (~1 min): every wrong output named by the x it read (37th session); a
        # test that hangs (a barrier never completed) has its stack dumped after 60 s, and a hang
        # in the tracer keeps the TMA forms out of the tests after it
        hang="-o faulthandler_timeout=60"
        b wgn_tracer 120 python3 -m pytest -q -p no:cacheprovider $hang plugins/quant_nvfp4/tests/test_mma_wgmma.py -k every_output
        grep -E "passed|failed|<-|Timeout|test_mma_wgmma.py:[0-9]+ in test" "$OUT/wgn_tracer.log" | tail -25
        skip=""
        grep -q "wgn_tracer rc=124" "$OUT/rc.txt" && skip=" and not tma"
        b wgn_tests 280 python3 -m pytest -q -p no:cacheprovider $hang plugins/quant_nvfp4/tests/test_mma_wgmma.py \
            -k "(natural or gated) and not every_output$skip"
        tail -15 "$OUT/wgn_tests.log"
        b wgn_dequant 90 python3 -m pytest -q -p no:cacheprovider plugins/quant_nvfp4/tests/test_mma_kernel.py -k "dequantized_from_the_repack"
        tail -5 "$OUT/wgn_dequant.log"
    else
        b wgn_chain 420 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --keep-plans "$OUT/plans" \
            --variants shipped wg wgn "wgn bulk" \
            "wgn kw2" "wgn kw4" "wgn bulk kw4" "wgn tma" "wgn tma kw2" "wgn tma kw4" "wgn bulk tma kw4"
        grep -v "^ " "$OUT/wgn_chain.log"
    fi
    cat "$OUT/rc.txt"
    ;;
wgn36v)
    # 2026-12-08 (37th, written, not run; either card, mini site, ~5 min): a candidate tilings file
    # ($PLAN: a path in the tree, e.g. one merged from wgn36c's kept plans) against the shipped
    # one: the issue's GEMM table (M = 1, 4, 16; % of the bytes roofline, CUDA graph, weights
    # rotated) under each, then the end-to-end decode under each
    [ -f "${PLAN:-}" ] || { echo "wgn36v: PLAN names no file (PLAN=path/to/tilings.json)"; exit 2; }
    for pdl in False True; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=$pdl, columns='natural', wg=True)" &
    done
    python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, columns='natural', trigger='start', row_scale='wait', wg=True)" &
    ROW_SCALE=wait pdl_cubins 4 8 > "$OUT/cubins.log" 2>&1; wait
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b gemm_shipped 120 python3 tools/gpu/nvfp4_gemm.py --skip-e2e --ms 1 4 16 --shapes qkv gate_up down
    b gemm_plan 120 env HINGE_NVFP4_MMA_PLAN="$PLAN" python3 tools/gpu/nvfp4_gemm.py --skip-e2e --ms 1 4 16 \
        --shapes qkv gate_up down
    paste "$OUT/gemm_shipped.log" "$OUT/gemm_plan.log" | grep -E "qkv|gate|down" | head -30
    b e2e_plan 200 python3 tools/gpu/nvfp4_gemm.py --skip-table --e2e-plan - "$PLAN"
    grep -E "/ bf16|decoding" "$OUT/e2e_plan.log"; cat "$OUT/rc.txt"
    ;;
wgx35)
    # 2026-12-08 (35th; either card, mini site, ~2 min): what the wgmma form's x costs it: x
    # staged once, or every superstep from the first one's pieces, against the GEMV's x once;
    # and its weights in rings of 8
    for cols in contiguous coalesced; do
        for stages in 4 8; do
            python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', $stages, pdl=True, columns='$cols', trigger='start', row_scale='wait', wg=True)" &
        done
    done
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    # (ran 2026-12-08 at 2d6ae99: out of its 240 s after qkv, each diagnostic cubin built in the
    # timed script, ~40 s each; wgx35b times what it left)
    b wg_x 240 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "x once" wg "wg x once" "wg x same" \
        "wg deep" "wg bulk deep" "wg x ahead"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/wg_x.log"
    ;;
wgx35b)
    # what wgx35 left (either card, mini site, ~4 min): x staged once or from the first
    # superstep's pieces on down and o, x from the first superstep's pieces on gate_up
    for cols in contiguous coalesced; do
        python3 -c "from hinge_nvfp4 import mma_gemv as m; m.cached_cubin('sm_90', 4, pdl=True, columns='$cols', trigger='start', row_scale='wait', wg=True)" &
    done
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"
    b wg_x2 330 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --shapes gate_up down o --variants shipped wg \
        "wg x once" "wg x same"
    cat "$OUT/rc.txt"; grep -v "^ " "$OUT/wg_x2.log"
    ;;
h200c)
    # 2026-12-07 (30th; an H200 only, mini site, ~2 min): the GEMVs back to back at 1, 8 and 16
    # rows under the H200's file as it is now (the H100's; the twenty-seventh session measured
    # the old one there); an H100 exits at once
    only_h200 h200c
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    # (and every shape's one-row launch in the xring form, which the H100 file names for qkv
    # and down since the thirty-second session: gate_up's is slower there)
    b chain_h200 130 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "few xring 1"
    cat "$OUT/rc.txt" "$OUT/chain_h200.log"
    ;;
h200b34)
    # 2026-12-07 (34th; an H200 only, mini site, ~6 min): h200c, then h200n
    only_h200 h200b34
    ROW_SCALE=wait pdl_cubins 4 > "$OUT/cubins.log" 2>&1
    b chain_h200 200 python3 tools/gpu/nvfp4_launch_chain.py --ms 1 8 16 --variants shipped "few xring 1" "no wait"
    grep -v "^ " "$OUT/chain_h200.log"
    nvfp4_both_files; cat "$OUT/rc.txt"
    ;;
h200n)
    # h200y's NVFP4 half alone (the mini site is enough): end to end and back to back under
    # the H200's tilings file and the H100's (~4 min)
    nvfp4_both_files; cat "$OUT/rc.txt"
    ;;
h200m)
    # h200n, then the read of each shape's bytes launched as the GEMVs are (read_ceiling's PDL
    # read: does a kernel with no arithmetic reach 70% of 4.8 TB/s on qkv?); the mini site (~7 min)
    nvfp4_both_files
    b ceil_pdl 200 python3 tools/gpu/read_ceiling.py --reads plain pdl pdl-wait-first --iters 20
    cat "$OUT/rc.txt"; cat "$OUT/ceil_pdl.log"
    ;;
*)
    exec bash "$(dirname "$0")/closed_lanes.sh" "$@"
    ;;
esac
