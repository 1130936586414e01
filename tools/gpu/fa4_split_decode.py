"""fa4's split decode alone: us per layer and kernels per layer, by split size and query form.

Decode of ``--batch`` requests (default 1 4 16) of ``--context`` keys (default 4096), GQA 32/8,
head dim 128, bf16, 128-token pages, one KV buffer per layer across enough layers to leave L2
(``fa4_attention.py``'s setup), each step captured in one CUDA graph through the backend's graph
protocol. Rows: the raw unsplit kernel, and hinge fa4 with ``split_kv = always`` at each
``--split-sizes`` in each of ``--forms`` (``FORMS``: the query form, the tile, pack_gqa; default
batched and varlen, and batched with ``split_tile_m`` 64); each with the kernels one layer launches
(torch profiler, eager: name and device time each, listed after the table) and the share of
copy bandwidth (goal at batch 1: >= 40%).

    python tools/gpu/fa4_split_decode.py             # a markdown table
    OUT=/tmp/out python tools/gpu/fa4_split_decode.py  # also $OUT/fa4_split_decode.json
"""

from __future__ import annotations

import argparse

import torch
from fa4_attention import (  # NOTE: the sibling script (sys.path[0] is this folder)
    DIM,
    DT,
    HEADS,
    KV_HEADS,
    L2_BYTES,
    PAGE,
    batch_of,
    copy_gbps,
    cuda_ms,
    graphed,
    kv_pool,
)
from out_json import save_json  # NOTE: the sibling module (tools/gpu is sys.path[0])

from hinge.contracts import AttentionLayer
from hinge.plugins.specs import BuildContext


def kernels_per_layer(fn) -> list[dict]:
    """The kernels one eager call of ``fn`` runs, in order: name and device microseconds."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [{"name": e.name, "us": e.time_range.elapsed_us()} for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def short(name: str) -> str:
    """A kernel's name without its template arguments (fa4's CuTe names run to hundreds of
    characters)."""
    if "flash_fwd" in name or "FlashAttentionForward" in name:
        return "fa4_fwd"
    return name.split("<")[0].split("(")[0].replace("void ", "").split("::")[-1][:40]


FORMS = {  # --forms: split_call, split_tile_m, split_tile_n, split_pack_gqa, intra_wg_overlap, rs
    "batched": ("batched", 128, 128, True, True, True), "varlen": ("varlen", 128, 128, True, True, True),
    "tile64": ("batched", 64, 128, True, True, True), "tile64-nopack": ("batched", 64, 128, False, True, True),
    "tile64x64": ("batched", 64, 64, True, True, True),
    "tile64x64-nopack": ("batched", 64, 64, False, True, True),
    "tile64-noolap": ("batched", 64, 128, True, False, True),
    "tile64-nors": ("batched", 64, 128, True, True, False),
}


def rows_for(batch_size: int, context: int, split_sizes: list[int], copy: float,
             forms: list[tuple], kv_saved: tuple[bool, ...] = (False,),
             tails: tuple[str, ...] = ("short",)) -> list[dict]:
    from flash_attn.cute import flash_attn_varlen_func

    from hinge_fa4.backend import FA4AttentionBackend
    from hinge_fa4.options import FA4Options

    pages_per = -(-(context + 1) // PAGE)
    per_layer = batch_size * context * KV_HEADS * DIM * 2 * 2
    num_layers = max(8, -(-4 * L2_BYTES // per_layer))
    kv = kv_pool(num_layers, 1 + batch_size * pages_per)
    layers = [AttentionLayer(i, HEADS, KV_HEADS, DIM, DIM**-0.5) for i in range(num_layers)]
    q = torch.randn(batch_size, HEADS, DIM, dtype=DT, device="cuda")
    k = torch.randn(batch_size, KV_HEADS, DIM, dtype=DT, device="cuda")
    live = batch_of([context] * batch_size, [1] * batch_size, pages_per)
    raw_args = dict(cu_seqlens_q=torch.arange(batch_size + 1, dtype=torch.int32, device="cuda"),
                    seqused_k=torch.full((batch_size,), context + 1, dtype=torch.int32, device="cuda"),
                    page_table=live.page_table.to(torch.int32).contiguous(), max_seqlen_q=1,
                    softmax_scale=DIM**-0.5, causal=True)

    def raw(i: int) -> None:
        flash_attn_varlen_func(q, kv.k[i].view(-1, PAGE, KV_HEADS, DIM),
                               kv.v[i].view(-1, PAGE, KV_HEADS, DIM), **raw_args)

    variants = [("raw kernel, no split", raw)]
    build = BuildContext(device="cuda", dtype=DT, deterministic=False, page_size=PAGE)
    for size, tail in ((size, tail) for size in split_sizes for tail in tails):
        for form, tile_m, tile_n, pack, overlap, rs in forms:
            options = FA4Options(split_kv="always", split_size=size, split_call=form,
                                 split_tile_m=tile_m, split_tile_n=tile_n, split_pack_gqa=pack,
                                 split_intra_wg_overlap=overlap, split_mma_pv_is_rs=rs, split_tail=tail)
            attn = FA4AttentionBackend(options, build)
            attn.warmup(layers[:1], kv)
            attn.init_graph_buffers(batch_size, batch_size, pages_per)
            holder, step = batch_of([context] * batch_size, [1] * batch_size, pages_per, static=True)
            attn.prepare_for_capture(holder.batch)
            attn.prepare_for_replay(step, batch_size)

            name = (f"fa4 split {size}" + (", long tail" if tail == "long" else "")
                    + f", {form}, tile {tile_m}x{tile_n}" + ("" if pack else ", no pack_gqa")
                    + ("" if overlap else ", no overlap") + ("" if rs else ", P via smem"))
            for saved in kv_saved:
                def one(i: int, a=attn, static=holder.batch, saved=saved) -> None:
                    a.forward(q, k, k, layers[i], kv, static, kv_saved=saved)

                variants.append((name + (", KV stored by the layer" if saved else ""), one))
    out = []
    for name, layer_fn in variants:
        try:
            kernels = kernels_per_layer(lambda f=layer_fn: f(0))
            ms = cuda_ms(graphed(lambda f=layer_fn: [f(i) for i in range(num_layers)])) / num_layers
        except Exception as exc:  # noqa: BLE001 - one failing row must not hide the others
            print(f"batch {batch_size} {name}: {type(exc).__name__}: {exc}")
            continue
        gbps = per_layer / ms / 1e6
        out.append({"batch": batch_size, "what": name, "us_per_layer": ms * 1e3, "gbps": gbps,
                    "of_copy": gbps / copy, "kernels": kernels})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--split-sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--forms", nargs="+", choices=sorted(FORMS), default=["batched", "varlen", "tile64"])
    parser.add_argument("--kv-saved", action="store_true",
                        help="also each split row with kv_saved=True (the KV written by the layer's "
                        "rope kernel, the engine's default): no KV write in the attention, and at "
                        "batch 1 the query row as a stride-0 view")
    parser.add_argument("--tails", nargs="+", choices=("short", "long"), default=["short"],
                        help="split_tail rules to time (hinge_fa4.split: a 1..C-key tail or C..2C)")
    args = parser.parse_args()
    copy = copy_gbps()
    forms = [FORMS[f] for f in args.forms]
    saved = (False, True) if args.kv_saved else (False,)
    rows = [r for b in args.batch for r in rows_for(b, args.context, args.split_sizes, copy, forms, saved,
                                                   tuple(args.tails))]
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s, {args.context} keys per request\n")
    print("| batch | what | us/layer | GB/s | of copy | kernels/layer |\n| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['batch']} | {r['what']} | {r['us_per_layer']:.1f} | {r['gbps']:.0f} | "
              f"{r['of_copy']:.0%} | {len(r['kernels'])} |")
    print("\nkernels of one eager layer (device us each, in launch order):")
    for r in rows:
        names = ", ".join(f"{short(k['name'])} {k['us']:.1f}" for k in r["kernels"])
        print(f"- batch {r['batch']}, {r['what']}: {names}")
    save_json("fa4_split_decode.json",
              {"device": torch.cuda.get_device_name(), "copy_gbps": copy, "rows": rows})


if __name__ == "__main__":
    main()
