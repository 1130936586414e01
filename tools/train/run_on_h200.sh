#!/usr/bin/env bash
# Train the embedded default model on one H200; the checkpoint and results land under $OUT.
#
# Here (CPU machine, Python 3.11.7), once:  python tools/train/token_corpus.py --out build/stdlib_corpus
# Device:  run(command="bash tools/train/run_on_h200.sh", carry=["build/stdlib_corpus"])
# Then copy $OUT/default_model/* into core/hinge/builtin/default_model/ and fill docs/default-model.md
# from $OUT/summary.json. Extra arguments go to train.py (e.g. --steps 800); STEPS overrides the default.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output directory}"
CORPUS="${CORPUS:-build/stdlib_corpus}"
STEPS="${STEPS:-1200}"
DEVICE="${DEVICE:-cuda}"
export PYTHONUNBUFFERED=1

if [ ! -f "$CORPUS/manifest.json" ]; then
  echo "error: no token corpus at $CORPUS; write it on the CPU machine (Python 3.11.7) with" >&2
  echo "  python tools/train/token_corpus.py --out $CORPUS   and carry it: carry=[\"$CORPUS\"]" >&2
  exit 2
fi

python3 - <<'PY'
import importlib.util, sys
import torch, transformers
fla = importlib.util.find_spec("fla") is not None
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}, cuda {torch.cuda.is_available()} "
      f"({torch.cuda.get_device_name() if torch.cuda.is_available() else '-'}), fla {fla}")
PY

python3 tools/train/train.py \
  --out "$OUT/default_model" --summary "$OUT/summary.json" --log "$OUT/train_log.jsonl" \
  --corpus "$CORPUS" --steps "$STEPS" --device "$DEVICE" --budget-s 420 --shrink-to-budget "$@" 2>&1 \
  | grep -v "falling back to its reference PyTorch implementation"

echo
echo "== summary (also in \$OUT/summary.json; checkpoint in \$OUT/default_model) =="
python3 - "$OUT/summary.json" <<'PY'
import json, sys
sys.path.insert(0, "tools/train")
from train import summary_table
print(summary_table(json.load(open(sys.argv[1]))))
PY
