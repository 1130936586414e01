"""The ``triton`` attention backend against the ``torch`` reference: decode, one layer, on the GPU.

One decode-attention call of a Qwen3-8B layer (32 query / 8 KV heads of 128, bf16, 16-token
pages) per batch size and context length: the torch backend eager, the triton backend eager
(metadata + launch) and replayed from a CUDA graph, the KV bytes the call must read over the
replay time (GB/s), the largest difference from the torch backend, and whether row 0 has the
same bits alone as in the batch (the batch-invariance claim).

    python tools/gpu/attention_triton.py                                  # batch 1/64, context 128/2048/8192
    python tools/gpu/attention_triton.py --batch 1 16 --context 4096 --split-kv never

Times are the mean over ``--reps`` calls, synchronised around the loop (host and device).
"""

from __future__ import annotations

import argparse
import time

import torch

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq
from hinge.builtin.plugin import TRITON_ATTENTION
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.contracts import AttentionLayer, KVCache
from hinge.plugins.specs import BuildContext

LAYER = AttentionLayer(kv_layer_id=0, num_heads=32, num_kv_heads=8, head_dim=128, scale=128**-0.5)
PAGE = 16


def timed(fn, reps: int) -> float:
    """Mean milliseconds per call."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def measure(b: int, ctx: int, kv: KVCache, options: dict, reps: int) -> tuple:
    dev, dt = torch.device("cuda"), torch.bfloat16
    build = BuildContext(device="cuda", dtype=dt, deterministic=True, page_size=PAGE)
    tri = TRITON_ATTENTION.build(TRITON_ATTENTION.validate_options(options), build)
    ref = TorchAttentionBackend(None, build)
    pages_per = -(-(ctx + 1) // PAGE)
    seqs = [StepSeq(row=i + 1, prefix_len=ctx, extend_len=1, new_tokens=[0], sample=True,
                    pages=list(range(1 + i * pages_per, 1 + (i + 1) * pages_per))) for i in range(b)]
    builder = ForwardBatchBuilder(page_size=PAGE, max_rows=b + 1, max_pages=pages_per, device=dev)
    batch = builder.build(seqs)
    q = torch.randn(b, LAYER.num_heads, LAYER.head_dim, dtype=dt, device=dev)
    k = torch.randn(b, LAYER.num_kv_heads, LAYER.head_dim, dtype=dt, device=dev)

    def eager(backend, batch=batch):
        batch.attn_metadata = backend.prepare_metadata(batch)
        return backend.forward(q, k, k, LAYER, kv, batch)

    t_ref, t_tri = timed(lambda: eager(ref), reps), timed(lambda: eager(tri), reps)
    out = eager(tri)
    diff = float((out.float() - eager(ref).float()).abs().max())
    alone_builder = ForwardBatchBuilder(page_size=PAGE, max_rows=2, max_pages=pages_per, device=dev)
    alone = tri.forward(q[:1], k[:1], k[:1], LAYER, kv, alone_builder.build(seqs[:1]))
    same = "yes" if torch.equal(alone[0], out[0]) else "NO"
    tri.init_graph_buffers(b, b, pages_per)
    static = builder.static_batch(GraphShape.decode(b))
    tri.prepare_for_capture(static.batch)
    qs, ks = q.clone(), k.clone()
    graph, _ = capture(lambda: tri.forward(qs, ks, ks, LAYER, kv, static.batch))
    tri.prepare_for_replay(builder.build(seqs, into=static), b)
    t_graph = timed(graph.replay, reps)
    kv_bytes = 2 * b * (ctx + 1) * LAYER.num_kv_heads * LAYER.head_dim * kv.k[0].element_size()
    return t_ref, t_tri, t_graph, kv_bytes / t_graph / 1e6, diff, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--context", type=int, nargs="+", default=[128, 2048, 8192])
    parser.add_argument("--split-kv", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--split-size", type=int, default=256)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    import triton

    dev, dt = torch.device("cuda"), torch.bfloat16
    pages_per = -(-(max(args.context) + 1) // PAGE)
    shape = (1 + max(args.batch) * pages_per) * PAGE, LAYER.num_kv_heads, LAYER.head_dim
    kv = KVCache([torch.randn(shape, dtype=dt, device=dev)], [torch.randn(shape, dtype=dt, device=dev)], PAGE)
    options = {"split_kv": args.split_kv, "split_size": args.split_size}
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{time.strftime('%Y-%m-%d')}, options {options}")
    start = time.perf_counter()
    build = BuildContext(device="cuda", dtype=dt, deterministic=True, page_size=PAGE)
    TRITON_ATTENTION.build(TRITON_ATTENTION.validate_options(options), build).warmup([LAYER], kv)
    print(f"warm-up (compiles both paths) {time.perf_counter() - start:.1f} s")
    print(f"{'batch':>5} {'context':>7} {'torch ms':>9} {'triton ms':>9} {'graph ms':>9} "
          f"{'graph GB/s':>10} {'x torch':>8} {'max |diff|':>10} {'same bits':>9}")
    for b in args.batch:
        for ctx in args.context:
            t_ref, t_tri, t_graph, gbs, diff, same = measure(b, ctx, kv, options, args.reps)
            print(f"{b:>5} {ctx:>7} {t_ref:>9.3f} {t_tri:>9.3f} {t_graph:>9.3f} {gbs:>10.0f} "
                  f"{t_ref / t_graph:>8.1f} {diff:>10.2e} {same:>9}")


if __name__ == "__main__":
    main()
