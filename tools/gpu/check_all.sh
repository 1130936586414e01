#!/usr/bin/env bash
# One batched GPU check of the core runtime and GPU issues (run from the repository root on the
# device machine, after the gpu-host pack is installed and sourced): the GPU test files in one
# lane of tools/gpu/lanes.sh (each file in its own process; FILES overrides the list), then the
# graphs and decode-step scripts. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
files=${FILES:-"tests/builtin/test_flashinfer_gpu.py tests/builtin/test_flashinfer_backend.py \
tests/layers/test_batch_invariant_gpu.py tests/layers/test_moe_triton.py tests/models/test_dense_gpu.py \
tests/test_llm.py tests/hybrid/test_deterministic_delta_rule_gpu.py tests/hybrid/test_gpu_kernels.py \
tests/builtin/test_triton_attention_graphs.py"}
LIMIT=150 bash tools/gpu/lanes.sh "$(echo $files | tr ' ' ',')"
timeout 150 python3 tools/gpu/graphs.py --batch 1 16 64 --attention triton > "$OUT/graphs_script.log" 2>&1
echo "graphs_script rc=$?"
timeout 150 python3 tools/gpu/decode_step.py --batch 1 64 --no-plain --steps 32 > "$OUT/decode_step_auto.log" 2>&1
echo "decode_step_auto rc=$?"
