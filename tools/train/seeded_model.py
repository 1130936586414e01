"""Write the seeded tiny random Qwen3 checkpoint (the interim embedded default).

    python tools/train/seeded_model.py --out core/hinge/builtin/default_model

Uses the tokenizer files already in ``--tokenizer`` (default: ``--out``; write them first with
tools/train/tokenizer.py). The weights come from ``torch.manual_seed(--seed)`` and transformers'
own initialisation, so the same torch/transformers versions give identical files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hinge.builtin.models import SEED, write_seeded_model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument(
        "--tokenizer", type=Path, default=None, help="directory with tokenizer.json"
    )
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    out = write_seeded_model(args.out, args.tokenizer or args.out, args.seed)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"seeded Qwen3 (seed {args.seed}) -> {out} ({size / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
