#!/usr/bin/env bash
# One batched GPU check of the core runtime and GPU issues (run from the repository root on the
# device machine, after the gpu-host pack is installed and sourced). Each pytest file runs in its
# own process (a device-side assert poisons the CUDA context of the process that hit it), each step
# under its own time limit; logs go to $OUT, a summary line per step is printed last.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-cache}
summary=()
step() {  # step NAME SECONDS CMD...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
    local last; last=$(grep -E "passed|failed|error" "$OUT/$name.log" | tail -1)
    summary+=("$(printf '%-28s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - start)) "$last")")
}
for f in ${FILES:-tests/builtin/test_flashinfer_gpu.py tests/builtin/test_flashinfer_backend.py \
        tests/layers/test_batch_invariant_gpu.py tests/layers/test_moe_triton.py \
        tests/models/test_dense_gpu.py tests/test_llm.py tests/hybrid/test_deterministic_delta_rule_gpu.py \
        tests/hybrid/test_gpu_kernels.py tests/builtin/test_triton_attention_graphs.py}; do
    step "$(basename "$f" .py)" 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf "$f"
done
for cmd in ${SCRIPTS:-}; do :; done
step graphs_script 150 python3 tools/gpu/graphs.py --batch 1 16 64 --attention triton
step decode_step_auto 150 python3 tools/gpu/decode_step.py --batch 1 64 --no-plain --steps 32
printf '%s\n' "${summary[@]}"
