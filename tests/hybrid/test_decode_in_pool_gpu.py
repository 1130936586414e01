"""The in-place decode kernel on CUDA at Qwen3.5-9B head sizes (run on the GPU host:
``pytest -m gpu tests/hybrid/test_decode_in_pool_gpu.py -s``): the bits of the token-recurrence
kernel from gathered states, close to fla's kernel, the same in a CUDA graph with new slots, a
decode layer's kernel count flat in the batch, and the time of a batch-64 decode against the
gather -> fla -> scatter path it replaced (printed: the bytes it saves are 2/3 of the states')."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from hinge.layers.recurrent_kernels import get_recurrent_kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

QWEN3_5 = dict(hk=16, hv=32, dk=128, dv=128)


def decode_inputs(b, hk, hv, dk, dv, slots=None, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    xs = (rand(b, hk, dk).bfloat16(), rand(b, hk, dk).bfloat16(), rand(b, hv, dv).bfloat16(),
          torch.nn.functional.logsigmoid(rand(b, hv) + 3.0), torch.sigmoid(rand(b, hv)).bfloat16())
    pool = rand(slots or 2 * b + 1, hv, dk, dv) * 0.1
    # slots 1..b read in a random order; the engine never has a request write a slot another
    # request of the step reads, so tests write the read slots themselves or slots b+1..2b
    read = torch.randperm(b, device="cuda", generator=gen) + 1
    return xs, pool, read


def in_pool(xs, pool, read, write, prefix, mode="deterministic"):
    """``decode_in_pool`` of the deterministic kernels, or (``mode="fla"``) of the fla kernels."""
    kernels = get_recurrent_kernels("cuda", "fla") if mode == "fla" else \
        get_recurrent_kernels("cuda", deterministic=True)
    return kernels.decode_in_pool(*xs, pool, read, write, prefix)


def _has_fla() -> bool:
    try:
        import fla  # noqa: F401
    except ImportError:
        return False
    return True


def test_decode_in_pool_gives_the_token_recurrence_kernels_bits_from_the_gathered_states():
    """Deterministic mode: the token-recurrence kernel's bits; default mode (the fla kernels,
    ``DEFAULT_MODE_TILE``): its own tiling, so the same values to float32 rounding of the states
    and bf16 rounding of the outputs."""
    xs, pool, read = decode_inputs(64, **QWEN3_5)
    det = get_recurrent_kernels("cuda", deterministic=True)
    want = det.gated_delta_rule(*xs, pool[read], list(range(65)))
    write = read + 64  # checkpoint slots: each request writes its own
    prefix = torch.ones(64, dtype=torch.int64, device="cuda")
    modes = ["deterministic"] + (["fla"] if _has_fla() else [])
    for mode in modes:
        p = pool.clone()
        out = in_pool(xs, p, read, write, prefix, mode)
        assert out is not None, f"{mode} kernels have an in-place decode path on CUDA"
        if mode == "deterministic":
            assert torch.equal(out, want.out) and torch.equal(p[write], want.final_state)
        else:
            out_err = (out.float() - want.out.float()).abs().max() / want.out.float().abs().max()
            state_err = (p[write] - want.final_state).abs().max() / want.final_state.abs().max()
            assert out_err < 1e-2 and state_err < 1e-5, (float(out_err), float(state_err))
        assert torch.equal(p[read], pool[read]), "the read slots are left as they were"


def test_decode_in_pool_is_close_to_fla_fused_recurrent():
    fla = pytest.importorskip("fla.ops.gated_delta_rule")
    xs, pool, read = decode_inputs(64, **QWEN3_5, seed=1)
    q, k, v, g, beta = xs
    rep = v.shape[1] // q.shape[1]
    out, final = fla.fused_recurrent_gated_delta_rule(
        q.repeat_interleave(rep, 1)[:, None], k.repeat_interleave(rep, 1)[:, None], v[:, None],
        g=g[:, None], beta=beta[:, None], scale=q.shape[-1] ** -0.5, initial_state=pool[read].contiguous(),
        output_final_state=True, use_qk_l2norm_in_kernel=True)
    got = in_pool(xs, pool, read, read, torch.ones_like(read))
    assert ((got.float() - out[:, 0].float()).abs().max() / out.float().abs().max()) < 1e-2
    assert ((pool[read] - final).abs().max() / final.abs().max()) < 1e-5


def test_decode_in_pool_replays_in_a_cuda_graph_with_new_slots_and_fresh_rows():
    xs, pool, read = decode_inputs(16, **QWEN3_5, seed=2)
    static = [x.clone() for x in xs]
    slots = torch.zeros(3, 16, dtype=torch.int64, device="cuda")  # read, write, prefix
    in_pool(static, pool.clone(), slots[0], slots[1], slots[2])  # compile outside the capture
    graph_pool = pool.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = in_pool(static, graph_pool, slots[0], slots[1], slots[2])
    for seed in (3, 4):
        fresh, _, new_read = decode_inputs(16, **QWEN3_5, seed=seed)
        write = new_read + 16
        prefix = (torch.arange(16, device="cuda") % 3).to(torch.int64)  # every third row fresh
        for dst, src in zip(static, fresh, strict=True):
            dst.copy_(src)
        slots.copy_(torch.stack([new_read, write, prefix]))
        eager_pool = graph_pool.clone()
        graph.replay()
        eager = in_pool(fresh, eager_pool, new_read, write, prefix)
        assert torch.equal(captured, eager) and torch.equal(graph_pool, eager_pool)


def _kernels_per_decode_layer(b: int) -> int:
    xs, pool, read = decode_inputs(b, **QWEN3_5, seed=5)
    in_pool(xs, pool, read, read, torch.ones_like(read))
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        in_pool(xs, pool, read, read, torch.ones_like(read))
        torch.cuda.synchronize()
    return sum(Counter(e.name for e in prof.events() if e.device_type.name == "CUDA").values())


def test_a_decode_layers_kernel_count_does_not_grow_with_the_batch():
    assert _kernels_per_decode_layer(2) == _kernels_per_decode_layer(64)


def _ms(fn, reps=50) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def test_a_batch_64_decode_layer_in_the_pool_is_faster_than_gather_fla_scatter():
    fla = pytest.importorskip("fla.ops.gated_delta_rule")
    xs, pool, read = decode_inputs(64, **QWEN3_5, slots=129, seed=6)
    q, k, v, g, beta = xs
    rep = v.shape[1] // q.shape[1]
    prefix = torch.ones_like(read)
    fresh = prefix == 0

    def gathered():  # what a graph-captured decode layer did before: gather, zero-fill, fla, scatter
        s0 = pool.index_select(0, read).masked_fill(fresh[:, None, None, None], 0)
        _, final = fla.fused_recurrent_gated_delta_rule(
            q.repeat_interleave(rep, 1)[:, None], k.repeat_interleave(rep, 1)[:, None], v[:, None],
            g=g[:, None], beta=beta[:, None], scale=q.shape[-1] ** -0.5, initial_state=s0,
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        pool.index_copy_(0, read, final)

    def in_place():
        in_pool(xs, pool, read, read, prefix)

    before, after = _ms(gathered), _ms(in_place)
    state_bytes = 64 * pool[0].numel() * 4
    print(f"\nbatch-64 decode layer: gather+fla+scatter {before * 1e3:.0f} us, in pool {after * 1e3:.0f} us "
          f"({2 * state_bytes / after / 1e9:.0f} GB/s of state read + written)")
    assert after < before
