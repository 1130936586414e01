"""``hinge quantize --method nvfp4 SRC DST [--calib FILE | --calib-samples N] [--exclude PATTERN ...]``
(registered through the ``register_commands`` hook; the work is ``hinge_nvfp4.export``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

METHODS = ("nvfp4",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="bf16/fp16/fp32 Hugging Face checkpoint directory")
    parser.add_argument("dst", metavar="DST", help="output directory (new or empty)")
    parser.add_argument("--method", required=True, choices=METHODS, help="quantization format")
    calib = parser.add_mutually_exclusive_group()
    calib.add_argument("--calib", metavar="FILE", help="calibration prompts: one per line, or JSON "
                       "lines with a 'text' field (input_scale = their activation amax / 2688)")
    parser.add_argument("--calib-samples", type=int, default=32, metavar="N",
                        help="prompts used (default 32); without --calib, N pieces of the Python "
                        "standard library's source (no download)")
    calib.add_argument("--input-amax", metavar="JSON", help="skip calibration: input amax per "
                       "checkpoint linear (experts: '<experts module>.w13' / '.w2'), e.g. to "
                       "reproduce a ModelOpt export")
    parser.add_argument("--exclude", nargs="+", default=[], metavar="PATTERN",
                        help="module names or globs to leave unquantized (besides ModelOpt's "
                        "defaults: lm_head, routers, DeltaNet in_proj_a/b, vision, MTP)")
    parser.add_argument("--device", default="cpu", help="where calibration runs (cpu or cuda)")
    parser.add_argument("--dtype", default="auto", help="calibration dtype (default: the checkpoint's)")


def run(args: argparse.Namespace) -> int:
    from hinge_nvfp4.export import quantize_checkpoint

    amax = None
    if args.input_amax:
        path = Path(args.input_amax)
        if not path.is_file():
            raise FileNotFoundError(f"--input-amax file {path} does not exist")
        amax = {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    summary = quantize_checkpoint(args.src, args.dst, input_amax=amax, calib=args.calib,
                                  calib_samples=args.calib_samples, exclude=tuple(args.exclude),
                                  device=args.device, dtype=args.dtype, progress=sys.stderr.isatty())
    print(json.dumps(summary))
    return 0
