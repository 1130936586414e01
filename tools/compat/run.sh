#!/usr/bin/env bash
# Runs real clients against `hinge serve` (embedded default model): lm-eval 0.4.13's
# local-completions loglikelihood on a local multiple_choice task, sglang 0.5.23's
# `bench_serving --backend sglang`, and an sglang frontend program (gen, choices, regex).
# Each client lives in its own venv under $WORK (default /tmp/hinge-compat). lm-eval is installed
# with pip under constraints.txt, on top of this machine's CPU torch (--system-site-packages);
# sglang with --no-deps plus the few pure-Python modules its client side imports (never its GPU
# stack). Not a CI test: it downloads packages. Results: $WORK/*.log; docs/compatibility.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${WORK:-/tmp/hinge-compat}"
PORT="${PORT:-30123}"
mkdir -p "$WORK"
cd "$ROOT"
URL="http://127.0.0.1:$PORT"

venv() {  # venv NAME: a venv that sees this machine's packages (the CPU torch among them)
  [ -x "$WORK/$1/bin/python" ] || python -m venv --system-site-packages "$WORK/$1"
  echo "$WORK/$1/bin/python"
}

LMEVAL=$(venv lmeval)
"$LMEVAL" -m pip install -q -c "$ROOT/constraints.txt" "lm-eval[api]==0.4.13" >"$WORK/lmeval-install.log" 2>&1
SGL=$(venv sglang)
"$SGL" -m pip install -q --no-deps "sglang==0.5.23" >"$WORK/sglang-install.log" 2>&1
"$SGL" -m pip install -q -c "$ROOT/constraints.txt" aiohttp requests tqdm numpy pybase64 orjson \
  setproctitle interegular partial_json_parser IPython psutil msgspec pyzmq datasets sentencepiece \
  compressed-tensors gguf >>"$WORK/sglang-install.log" 2>&1
# sglang's client modules import torchvision at module level (multimodal configs) and never call
# it; PyPI's torchvision does not load beside this CPU torch, so an import-only stand-in is used
"$SGL" -m pip uninstall -y -q torchvision >>"$WORK/sglang-install.log" 2>&1 || true
cp -r "$ROOT/tools/compat/stubs/torchvision" "$("$SGL" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"

MODEL="$(python -c 'from hinge.builtin import default_model_path; print(default_model_path())')"
python -m hinge.cli serve "$MODEL" --port "$PORT" --cache none --log-level warning \
  >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "$URL/health" >/dev/null && break; sleep 1; done

status=0
echo "== lm-eval local-completions, multiple_choice (loglikelihood)"
"$LMEVAL" -m lm_eval --model local-completions \
  --model_args "base_url=$URL/v1/completions,model=default,num_concurrent=1,max_retries=1" \
  --tasks hinge_mc --include_path "$ROOT/tools/compat/tasks" --limit 20 \
  >"$WORK/lmeval.log" 2>&1 && tail -n 8 "$WORK/lmeval.log" || { status=1; tail -n 30 "$WORK/lmeval.log"; }

echo "== sglang bench_serving --backend sglang"
# the random dataset samples token ids from ShareGPT-format text: a local file (no download)
python - "$WORK/sharegpt.json" <<'PY'
import inspect, json, sys, textwrap
text = inspect.getsource(textwrap)
chunks = [text[i:i + 400] for i in range(0, len(text), 400)]
rows = [{"conversations": [{"from": "human", "value": a}, {"from": "gpt", "value": b}]}
        for a, b in zip(chunks, chunks[1:])]
json.dump(rows, open(sys.argv[1], "w"))
PY
"$SGL" -m sglang.bench_serving --backend sglang --base-url "$URL" --tokenizer "$MODEL" \
  --dataset-name random --dataset-path "$WORK/sharegpt.json" --random-input-len 32 \
  --random-output-len 16 --num-prompts 8 --random-range-ratio 1.0 \
  --output-file "$WORK/bench_serving.jsonl" \
  >"$WORK/bench_serving.log" 2>&1 \
  && grep -E "Successful requests|Output token throughput|Benchmark duration" "$WORK/bench_serving.log" \
  || { status=1; tail -n 30 "$WORK/bench_serving.log"; }

echo "== sglang frontend: RuntimeEndpoint, gen / choices / regex"
"$SGL" "$ROOT/tools/compat/sgl_program.py" "$URL" >"$WORK/sgl_program.log" 2>&1 \
  && cat "$WORK/sgl_program.log" || { status=1; tail -n 30 "$WORK/sgl_program.log"; }
exit $status
