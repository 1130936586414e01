"""CUDA graphs the plan allows: capture the ladders, pad every step that fits, replay.

Shapes (``hinge.batching.GraphShape``) come from the plan's decisions (``GraphDecision.sizes``):
decode-shaped graphs for every batch size of the ladder times every ``tokens_per_request``, and
prefill-shaped graphs for every token count of the ladder (up to ``max_requests`` requests of any
lengths: prefill and mixed steps). They are captured largest first into one memory pool, so the
smaller graphs reuse the largest one's activation memory.

Per step (``ModelRunner.forward``): ``find`` picks the smallest captured shape the step fits, or
None (the step runs eager: no graph for its phase, too many requests or tokens, prompt logprobs,
hidden-state capture, per-position states, a recurrent-state checkpoint inside the step); ``replay`` writes the live step into that shape's
static tensors through the batch builder (padded rows cleared on every replay, invariant 4), lets
the attention backend refill its static metadata (``prepare_for_replay``), replays, and returns
the logits of the live rows only.

Why the builder writes the static tensors (``build(..., into=static)``) instead of the runner
copying a live batch in: the padding is then laid out on the host in the same staging buffer as
the live values, so a replayed step costs what an eager one does (one host-to-device copy) plus
one copy into the static block and one gather of the page-table rows, not a dozen slice copies.
Decode steps whose token is still on the device (overlap scheduling) read ``builder.last_tokens``
into the static ``input_ids`` exactly as an eager step reads them into its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hinge.batching import GraphShape, StaticBatch
from hinge.forward import ForwardContext

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from hinge.batching import ForwardBatchBuilder, StepSeq
    from hinge.plugins.plan import GraphDecision

logger = logging.getLogger(__name__)


class CudaGraph:
    """One ``torch.cuda.CUDAGraph`` in the shared pool, warmed up once before capture."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.graph = pool, torch.cuda.CUDAGraph()

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: lazy init, kernel compilation, workspaces
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(self.graph, pool=self.pool):
            return fn()

    def replay(self) -> None:
        self.graph.replay()


class RerunGraph:
    """A CUDA graph's behaviour without CUDA (CPU tests): replay runs the captured function again
    over the same static tensors and writes its output into the captured output tensor."""

    def __init__(self, pool: Any = None) -> None:
        self.fn: Callable[[], torch.Tensor] | None = None
        self.out: torch.Tensor | None = None

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        self.fn = fn
        self.out = fn()
        return self.out

    def replay(self) -> None:
        with torch.inference_mode():
            self.out.copy_(self.fn())


@dataclass
class CapturedGraph:
    shape: GraphShape
    static: StaticBatch
    graph: Any  #: CudaGraph or RerunGraph
    logits: torch.Tensor  #: (num_logits, vocab) float32, written by every replay

    @property
    def phase(self) -> str:
        """The graph phase its replays count under (``EngineStats.graph_replays``)."""
        return "prefill" if self.shape.tokens_per_request is None else "decode"


def ladder_shapes(decisions: dict[str, GraphDecision]) -> list[GraphShape]:
    """Every shape the enabled decisions ask for, in capture order (largest first)."""
    shapes: list[GraphShape] = []
    decode, prefill = decisions.get("decode"), decisions.get("prefill")
    if decode is not None and decode.enabled:
        shapes += [GraphShape.decode(b, q) for q in decode.tokens_per_request for b in decode.sizes]
    if prefill is not None and prefill.enabled:
        shapes += [GraphShape.prefill(n, prefill.max_requests) for n in prefill.sizes]
    return capture_order(shapes)


def capture_order(shapes: Iterable[GraphShape]) -> list[GraphShape]:
    """Largest first (tokens, then requests), so every later graph fits in the pool's memory."""
    return sorted(set(shapes), key=lambda s: (s.num_tokens, s.num_requests, s.num_logits),
                  reverse=True)


class GraphRunner:
    """Captured graphs of one model over one KV pool, state pool and batch builder.

    Attention per phase: decode-shaped graphs capture ``attn_decode``, prefill-shaped ones
    ``attn`` (the same object unless the plan splits the phases; then a decode step only replays
    a decode-shaped graph and a prefill or mixed step only a prefill-shaped one)."""

    def __init__(self, model: Any, attn: Any, kv: Any, states: Any, builder: ForwardBatchBuilder,
                 shapes: Sequence[GraphShape], *, graph_type: type = CudaGraph,
                 attn_decode: Any = None) -> None:
        self.model, self.attn, self.kv, self.states, self.builder = model, attn, kv, states, builder
        self.attn_decode = attn_decode if attn_decode is not None else attn
        self.shapes = capture_order(shapes)
        self.graph_type = graph_type
        self.graphs: list[CapturedGraph] = []
        self.replays = {"prefill": 0, "decode": 0}
        self._decode: dict[int, list[CapturedGraph]] = {}  # tokens per request -> by batch size
        self._prefill: list[CapturedGraph] = []  # by token count
        self._prefill_requests = 0

    # -- start-up -----------------------------------------------------------------------------

    def capture(self) -> None:
        """Capture every shape, largest first, into one pool. Called once, before serving."""
        if not self.shapes:
            return
        cuda = self.graph_type is CudaGraph
        started, free = time.perf_counter(), torch.cuda.mem_get_info()[0] if cuda else 0
        max_rows = max(s.num_requests for s in self.shapes)
        for attn in {id(self.attn_of(s)): self.attn_of(s) for s in self.shapes}.values():
            mine = [s for s in self.shapes if self.attn_of(s) is attn]
            attn.init_graph_buffers(max(s.num_requests for s in mine),
                                    max(s.num_tokens for s in mine), self.builder.max_pages)
        page_table = torch.zeros(max_rows, self.builder.max_pages, dtype=torch.int64,
                                 device=self.builder.device)
        # NOTE: one logits buffer for every graph, outside the pool: each graph's own output
        # would stay allocated in the pool (L x vocab float32 per shape)
        out = torch.empty(max(s.num_logits for s in self.shapes), self.model.config.vocab_size,
                          dtype=torch.float32, device=self.builder.device)
        pool = torch.cuda.graph_pool_handle() if cuda else None
        for shape in self.shapes:
            static = self.builder.static_batch(shape, page_table=page_table)
            attn = self.attn_of(shape)
            attn.prepare_for_capture(static.batch)
            ctx = ForwardContext(batch=static.batch, attn=attn, kv=self.kv, states=self.states)
            logits = out[:shape.num_logits]
            graph = self.graph_type(pool)
            with torch.inference_mode():
                graph.capture(lambda ctx=ctx, logits=logits: logits.copy_(self.model.forward(ctx).logits))
            self.graphs.append(CapturedGraph(shape, static, graph, logits))
        for g in reversed(self.graphs):  # smallest first, for find()
            if g.shape.tokens_per_request is None:
                self._prefill.append(g)
                self._prefill_requests = g.shape.num_requests - 1
            else:
                self._decode.setdefault(g.shape.tokens_per_request, []).append(g)
        used = (free - torch.cuda.mem_get_info()[0]) / 2**30 if cuda else 0.0
        logger.info("cuda graphs: captured %d shapes in %.1f s (%.2f GiB): %s", len(self.graphs),
                    time.perf_counter() - started, used, self.describe())

    def attn_of(self, shape: GraphShape) -> Any:
        """The attention backend a shape captures: decode-shaped -> ``attn_decode``."""
        return self.attn if shape.tokens_per_request is None else self.attn_decode

    def describe(self) -> str:
        parts = [f"decode x{q}: batch {', '.join(str(g.shape.num_requests) for g in gs)}"
                 for q, gs in sorted(self._decode.items())]
        if self._prefill:
            parts.append(f"prefill: tokens {', '.join(str(g.shape.num_tokens) for g in self._prefill)}"
                         f" (up to {self._prefill_requests} requests)")
        return "; ".join(parts) or "none"

    # -- per step -----------------------------------------------------------------------------

    def find(self, seqs: Sequence[StepSeq], *, track_states: bool = False,
             capture_hidden_layers: tuple[int, ...] = (), phase: str | None = None
             ) -> CapturedGraph | None:
        """The smallest captured shape ``seqs`` fits, or None: run the step eager. With the
        phases split over two backends, ``phase`` (the batch phase) keeps a decode step on a
        decode-shaped graph and a prefill or mixed step on a prefill-shaped one."""
        if not self.graphs or not seqs or track_states or capture_hidden_layers:
            return None
        if any(s.logits_rows for s in seqs):  # prompt logprobs: logits of many rows
            return None
        if any(s.checkpoint_len for s in seqs):  # a checkpoint inside the step: split on the host
            return None
        split = self.attn_decode is not self.attn and phase is not None
        decode_phase = phase in ("decode", "verify")
        b, q = len(seqs), seqs[0].extend_len
        if all(s.extend_len == q for s in seqs) and (decode_phase or not split):
            for g in self._decode.get(q, ()):
                if g.shape.num_requests >= b:
                    return g
        if split and decode_phase:
            return None
        if b <= self._prefill_requests:
            t = sum(s.extend_len for s in seqs)
            for g in self._prefill:
                if g.shape.num_tokens >= t:
                    return g
        return None

    def replay(self, graph: CapturedGraph, seqs: Sequence[StepSeq], phase: str, *,
               stamp: int = 0) -> torch.Tensor:
        """Run ``seqs`` through ``graph``: (live logit rows, vocab), rows as an eager step's.

        Recurrent state: the static ``state_slots`` / ``state_write_slots`` / ``state_stamps``
        rows are rewritten on every replay (live rows, then padded rows reading and writing the
        reserved slot 0 with stamp 0), so a checkpoint at the step's end is the captured state
        write itself and no stale row of an earlier replay writes anywhere but slot 0."""
        batch = self.builder.build(seqs, phase=phase, into=graph.static,  # type: ignore[arg-type]
                                   stamp=stamp)
        self.attn_of(graph.shape).prepare_for_replay(batch, graph.shape.num_requests)
        graph.graph.replay()
        self.replays[graph.phase] += 1
        return graph.logits[:sum(s.sample for s in seqs)]


def capture_graphs(decisions: dict[str, GraphDecision], runner: Any, *,
                   graph_type: type = CudaGraph) -> GraphRunner | None:
    """Capture what ``decisions`` (``plan.graphs``) enable for ``runner``'s model and pools; None
    when nothing is enabled. A failed capture is an error under ``require`` and a warning (every
    step eager) under ``auto``."""
    shapes = ladder_shapes(decisions)
    if not shapes:
        return None
    graphs = GraphRunner(runner.model, runner.attn, runner.kv, runner.states, runner.builder, shapes,
                         graph_type=graph_type, attn_decode=getattr(runner, "attn_decode", None))
    try:
        graphs.capture()
    except Exception as exc:
        required = [p for p, d in decisions.items() if d.enabled and d.mode == "require"]
        what = f"capturing CUDA graphs failed: {type(exc).__name__}: {exc}"
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            what = ("capturing CUDA graphs ran out of GPU memory after the KV pool was sized: "
                    "lower mem_fraction_static (more room for graphs), max_running_requests or "
                    "chunked_prefill_size, or set graphs.prefill = off (its pool holds a whole step)")
        if required:
            raise GraphCaptureError(
                f"graphs.{required[0]} = require, but {what}; lower max_running_requests or "
                "chunked_prefill_size (fewer, smaller shapes), or set graphs.<phase> = auto") from exc
        logger.warning("%s; every step runs eager (graphs.prefill/decode = off skips the capture)",
                       what)
        return None
    return graphs


class GraphCaptureError(ValueError):
    """Capture failed for a phase the config requires (``graphs.<phase> = require``)."""
