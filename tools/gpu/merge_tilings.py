"""A tilings file whose shapes' entries come from other tilings files: a base and, shape by shape,
the file whose entry wins (e.g. the variants ``nvfp4_launch_chain.py --keep-plans`` kept).

    python tools/gpu/merge_tilings.py OUT BASE [SHAPE=FILE ...]

SHAPE is a name of ``nvfp4_gemm.SHAPES`` (qkv, gate_up, down, o) or an ``NxK`` key. Every entry of
the result is checked as the kernel reads it (``mma_tiling.tiling``) before OUT is written, so a
device call is not spent on a file the engine refuses.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nvfp4_gemm import SHAPES  # NOTE: the sibling script

#: the shapes' names as the GPU scripts print them -> their tilings keys
SHAPE_KEYS = {label.split()[0]: f"{n}x{k}" for label, (n, k) in SHAPES.items()}


def shape_key(name: str) -> str:
    if name in SHAPE_KEYS:
        return SHAPE_KEYS[name]
    n, x, k = name.partition("x")
    if not (x and n.isdigit() and k.isdigit()):
        raise ValueError(f"no shape {name!r}: name one of {', '.join(SHAPE_KEYS)} or an NxK key such as 6144x4096")
    return name


def merge(base: dict, picks: dict[str, dict]) -> dict:
    """``base`` with each key of ``picks`` (shape key -> a tilings file's contents) taking that
    file's entry for the shape; each entry of the result checked by ``mma_tiling.tiling``."""
    from hinge_nvfp4 import mma_tiling

    out = dict(base)
    for key, tilings in picks.items():
        if key not in tilings:
            raise ValueError(f"the file picked for {key} has no entry for it (it has {', '.join(tilings) or 'none'})")
        out[key] = tilings[key]
    for key in out:
        n, k = map(int, key.split("x"))
        mma_tiling.tiling(n, k, 132, out)  # raises, naming the key, where the kernel would refuse it
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("base", type=Path)
    parser.add_argument("picks", nargs="*", metavar="SHAPE=FILE")
    args = parser.parse_args(argv)
    picks = {}
    for pick in args.picks:
        name, eq, path = pick.partition("=")
        if not eq:
            parser.error(f"{pick!r} is not SHAPE=FILE (e.g. qkv=plans/wgn_kw4.json)")
        picks[shape_key(name)] = json.loads(Path(path).read_text())
    merged = merge(json.loads(args.base.read_text()), picks)
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"{args.out}: " + ", ".join(f"{key} {entry.get('form', 'plain')} kwarps {entry['kwarps']} "
                                      f"splits {entry['splits']} {entry.get('columns', 'contiguous')}"
                                      for key, entry in merged.items()))


if __name__ == "__main__":
    main()
