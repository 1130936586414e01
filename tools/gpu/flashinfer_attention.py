"""The ``flashinfer`` attention backend against the ``torch`` reference, one layer, on the GPU.

Prints flashinfer's version and JIT cache directory, how long ``warmup`` took in this process
(compiling, or loading from the disk cache: run the script twice to see both), then per batch
size the time of one decode-attention call of a Qwen3-8B layer (32 query / 8 KV heads of 128,
bf16) over ``--context`` cached tokens: the torch backend eager, flashinfer eager (plan + run),
and flashinfer replayed from a CUDA graph (run only; the plan is host work outside the graph),
with the largest difference from the torch backend's output. ``--options`` compares backend
option sets (JSON ``attention_options`` each); ``--layers N`` captures N layer calls in one graph
and reports the graph's time a layer (us), as a decode step's layers run back to back.

    python tools/gpu/flashinfer_attention.py --batch 1 16 64 --context 1024
    python tools/gpu/flashinfer_attention.py --batch 1 --context 130 --layers 36 --options '{}' \
        '{"decode_tensor_cores": "off"}' '{"decode_split_kv": "never"}'
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from hinge.batching import ForwardBatchBuilder, GraphShape, StepSeq
from hinge.builtin.flashinfer_attention import FlashInferAttentionBackend
from hinge.builtin.flashinfer_options import FlashInferOptions
from hinge.builtin.flashinfer_runtime import jit_cache_dir
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.contracts import AttentionLayer, KVCache
from hinge.plugins.specs import BuildContext

LAYER = AttentionLayer(kv_layer_id=0, num_heads=32, num_kv_heads=8, head_dim=128, scale=128**-0.5)
PAGE = 16


def timed(fn, reps: int = 20) -> float:
    """Mean milliseconds per call (host and device: synchronised around the loop)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--options", nargs="+", default=["{}"], help="attention_options JSON sets")
    parser.add_argument("--layers", type=int, default=1, help="layer calls captured in one graph")
    args = parser.parse_args()
    for options in args.options:
        run(args, FlashInferOptions(**json.loads(options)))


def run(args: argparse.Namespace, options: FlashInferOptions) -> None:
    import flashinfer

    dev, dt = torch.device("cuda"), torch.bfloat16
    build = BuildContext(device="cuda", dtype=dt, deterministic=False, page_size=PAGE)
    pages_per = -(-(args.context + 1) // PAGE)
    num_pages = 1 + max(args.batch) * pages_per
    shape = (num_pages * PAGE, LAYER.num_kv_heads, LAYER.head_dim)
    kv = KVCache([torch.randn(shape, dtype=dt, device=dev)], [torch.randn(shape, dtype=dt, device=dev)], PAGE)
    fi, ref = FlashInferAttentionBackend(options, build), TorchAttentionBackend(None, build)
    start = time.perf_counter()
    fi.warmup([LAYER], kv)
    print(f"flashinfer {flashinfer.__version__}, JIT cache {jit_cache_dir()}, "
          f"warm-up {time.perf_counter() - start:.1f} s, {torch.cuda.get_device_name()}, "
          f"options {options.model_dump(exclude_defaults=True)}, context {args.context}")
    print(f"{'batch':>5} {'torch ms':>9} {'fi eager ms':>11} {'fi graph ms':>11} {'us a layer':>10} "
          f"{'max |fi - torch|':>17}")
    fi.init_graph_buffers(max(args.batch), max(args.batch), pages_per)
    for b in args.batch:
        builder = ForwardBatchBuilder(page_size=PAGE, max_rows=b + 1, max_pages=pages_per, device=dev)
        seqs = [StepSeq(row=i + 1, prefix_len=args.context, extend_len=1, new_tokens=[0],
                        pages=list(range(1 + i * pages_per, 1 + (i + 1) * pages_per)), sample=True)
                for i in range(b)]
        batch = builder.build(seqs)
        q = torch.randn(b, LAYER.num_heads, LAYER.head_dim, dtype=dt, device=dev)
        k = torch.randn(b, LAYER.num_kv_heads, LAYER.head_dim, dtype=dt, device=dev)

        def eager(backend, batch=batch, q=q, k=k):
            batch.attn_metadata = backend.prepare_metadata(batch)
            return backend.forward(q, k, k, LAYER, kv, batch)

        t_ref, t_fi = timed(lambda: eager(ref)), timed(lambda: eager(fi))
        diff = float((eager(fi).float() - eager(ref).float()).abs().max())
        static = builder.static_batch(GraphShape.decode(b))
        fi.prepare_for_capture(static.batch)
        fi.prepare_for_replay(builder.build(seqs, into=static), b)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fi.forward(q, k, k, LAYER, kv, static.batch)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            for _ in range(args.layers):
                fi.forward(q, k, k, LAYER, kv, static.batch)
        t_graph = timed(graph.replay)
        print(f"{b:>5} {t_ref:>9.3f} {t_fi:>11.3f} {t_graph:>11.3f} {t_graph * 1e3 / args.layers:>10.2f} "
              f"{diff:>17.4f}")


if __name__ == "__main__":
    main()
