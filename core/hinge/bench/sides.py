"""The sides of an in-process benchmark: hinge's engine and transformers' ``generate``.

A side is opened (its model built), run once per benchmark point and repeat, and closed (its
memory given back, so the next side on the same GPU gets it).
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from hinge.bench.hf import bench_hf, build_hf_random, load_hf
from hinge.bench.offline import bench_hinge
from hinge.bench.result import BenchResult

if TYPE_CHECKING:
    from hinge.bench.points import Point
    from hinge.config import EngineConfig


class HingeSide:
    """The engine of ``config`` in this process."""

    name = "hinge"

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.engine: Any = None
        self.num_parameters: int | None = None

    def open(self) -> None:
        from hinge.engine.engine import Engine

        self.engine = Engine(self.config)
        self.num_parameters = sum(p.numel() for p in self.engine.model.parameters())

    def run(self, point: Point, output_len: int, progress: Any = None) -> BenchResult:
        return bench_hinge(self.engine, point.prompts, output_len, arrivals=point.arrivals,
                           max_concurrency=point.concurrency, request_rate=point.request_rate,
                           progress=progress)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None


class HFSide:
    """transformers' model: the checkpoint's weights, or (``random_weights``) the same
    configuration with transformers' own random initialisation."""

    name = "transformers"

    def __init__(self, model_path: str, *, device: str, dtype: Any, random_weights: bool,
                 pad_id: int) -> None:
        self.model_path, self.device, self.dtype = model_path, device, dtype
        self.random_weights, self.pad_id = random_weights, pad_id
        self.model: Any = None

    def open(self) -> None:
        build = build_hf_random if self.random_weights else load_hf
        self.model = build(self.model_path, device=self.device, dtype=self.dtype)

    def run(self, point: Point, output_len: int, progress: Any = None) -> BenchResult:
        result = bench_hf(self.model, point.prompts, output_len, batch_size=point.hf_batch_size,
                          pad_id=self.pad_id)
        if progress is not None:
            progress.update(len(point.prompts))
        return result

    def close(self) -> None:
        self.model = None
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
