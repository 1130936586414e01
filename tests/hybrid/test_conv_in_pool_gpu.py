"""The in-place decode conv on CUDA at Qwen3.5-9B and LFM2 sizes (run on the GPU host:
``pytest -m gpu tests/hybrid/test_conv_in_pool_gpu.py -s``): outputs and windows against the torch
reference conv from gathered windows (bf16: one SiLU ulp), fresh requests from zeros, and the same
in a CUDA graph replayed with new slots and inputs. Its speed is in the decode-step profile of
``tools/gpu/roofline.py --profile`` (kernels per step)."""

from __future__ import annotations

import pytest
import torch

from hinge.layers.recurrent_kernels.torch_ref import torch_causal_conv1d

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: Qwen3.5-9B DeltaNet: 2 x 16 key heads x 128 + 32 value heads x 128 channels, kernel 4; LFM2
SIZES = {"qwen3_5": (8192, 4, "silu", False), "lfm2": (2048, 3, None, True)}


def _inputs(b, c, k, bias, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").bfloat16()

    x = rand(b, c + 64)[:, 64:]  # a view of a wider projection, as the layers pass it
    pool = rand(2 * b + 1, c, k - 1)
    read = torch.randperm(b, device="cuda", generator=gen) + 1
    return x, rand(c, k), rand(c) if bias else None, pool, read


def _conv_in_pool(*args, **kwargs):
    from hinge.layers.recurrent_kernels.conv_in_pool import conv_in_pool

    return conv_in_pool(*args, **kwargs)


@pytest.mark.parametrize("model", list(SIZES))
def test_cuda_conv_in_pool_matches_the_reference_from_gathered_windows(model):
    c, k, act, bias = SIZES[model]
    b = 64
    x, weight, bias_t, pool, read = _inputs(b, c, k, bias)
    prefix = torch.ones(b, dtype=torch.int64, device="cuda")
    prefix[::7] = 0  # fresh requests start from zeros
    windows = pool[read].masked_fill((prefix == 0)[:, None, None], 0)
    want = torch_causal_conv1d(x, weight, bias_t, windows, list(range(b + 1)), activation=act)
    write = read + b  # checkpoint slots: each request writes its own
    before = pool.clone()
    out = _conv_in_pool(x, weight, bias_t, pool, read, write, prefix, activation=act)
    torch.testing.assert_close(out.float(), want.out.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(pool[write], want.final_window), "the window after the token, exactly"
    assert torch.equal(pool[read], before[read]) and torch.equal(pool[0], before[0])


def test_cuda_conv_in_pool_replays_in_a_graph_with_new_slots_and_inputs():
    c, k, act, _ = SIZES["qwen3_5"]
    b = 16
    x, weight, _, pool, read = _inputs(b, c, k, False, seed=1)
    write, prefix = read.clone(), torch.ones(b, dtype=torch.int64, device="cuda")
    static = dict(x=x.clone(), read=read.clone(), write=write.clone(), prefix=prefix.clone())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    scratch = pool.clone()
    with torch.cuda.stream(side):
        _conv_in_pool(static["x"], weight, None, scratch, static["read"], static["write"],
                      static["prefix"], activation=act)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _conv_in_pool(static["x"], weight, None, pool, static["read"], static["write"],
                            static["prefix"], activation=act)
    for seed in range(3):
        x2, _, _, _, read2 = _inputs(b, c, k, False, seed=10 + seed)
        eager_pool = pool.clone()
        want = _conv_in_pool(x2, weight, None, eager_pool, read2, read2 + b, prefix, activation=act)
        static["x"].copy_(x2)
        static["read"].copy_(read2)
        static["write"].copy_(read2 + b)
        graph.replay()
        assert torch.equal(out, want) and torch.equal(pool, eager_pool), seed



@pytest.mark.parametrize("model", list(SIZES))
def test_deterministic_kernels_decode_the_conv_in_the_pool_with_the_torch_convs_bits(model):
    """Deterministic mode on CUDA: ``conv_in_pool_exact`` (through the deterministic kernels)
    gives the gathered torch conv's output and window bit for bit: a decode row equals the
    prefill row of its position, which the torch conv computes."""
    from hinge.layers.recurrent_kernels.torch_ref import TorchRecurrentKernels

    c, k, act, bias = SIZES[model]
    b = 64
    x, weight, bias_t, pool, read = _inputs(b, c, k, bias, seed=2)
    prefix = torch.ones(b, dtype=torch.int64, device="cuda")
    prefix[::5] = 0
    windows = pool[read].masked_fill((prefix == 0)[:, None, None], 0)
    want = torch_causal_conv1d(x, weight, bias_t, windows, list(range(b + 1)), activation=act,
                               deterministic=True)
    write = read + b
    out = TorchRecurrentKernels(deterministic=True).conv_in_pool(
        x, weight, bias_t, pool, read, write, prefix, activation=act)
    assert out is not None, "deterministic CUDA decodes the conv in the pool"
    assert torch.equal(out, want.out), f"max diff {(out.float() - want.out.float()).abs().max():.3g}"
    assert torch.equal(pool[write], want.final_window)


def _packed_prefill(model, window_dtype, seed):
    """A packed varlen prefill of requests of 1..300 tokens, some shorter than the window, one
    fresh (zero window): (x, weight, bias, windows, cu_seqlens, activation)."""
    c, k, act, bias = SIZES[model]
    cu = [0]
    for n in [1, 300, 2, 17, 64, 3]:
        cu.append(cu[-1] + n)
    x, weight, bias_t, _, _ = _inputs(cu[-1], c, k, bias, seed=seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    windows = torch.randn(len(cu) - 1, c, k - 1, generator=gen, device="cuda").to(window_dtype)
    windows[3] = 0
    return x, weight, bias_t, windows, cu, act


@pytest.mark.parametrize("model", list(SIZES))
@pytest.mark.parametrize("window_dtype", [torch.bfloat16, torch.float32])
def test_cuda_conv_prefill_matches_the_reference_over_a_packed_varlen_batch(model, window_dtype):
    """``conv_prefill`` (the fla kernels' CUDA prefill conv): final windows exactly the
    reference's (a float32 window rounds to bfloat16 as torch casts it), outputs to bf16 rounding
    (SiLU's exp)."""
    from hinge.layers.recurrent_kernels.conv_prefill import conv_prefill

    x, weight, bias, windows, cu, act = _packed_prefill(model, window_dtype, seed=5)
    got = conv_prefill(x, weight, bias, windows, cu, activation=act)
    want = torch_causal_conv1d(x, weight, bias, windows, cu, activation=act)
    torch.testing.assert_close(got.out.float(), want.out.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(got.final_window, want.final_window)


@pytest.mark.parametrize("model", list(SIZES))
@pytest.mark.parametrize("window_dtype", [torch.bfloat16, torch.float32])
def test_cuda_deterministic_prefill_conv_has_the_reference_bits(model, window_dtype):
    """Deterministic mode's prefill conv on CUDA (``conv_prefill_exact``, which
    ``TorchRecurrentKernels(deterministic=True)`` takes there): outputs and final windows bit for
    bit the torch reference's, which ``conv_in_pool_exact``'s decode rows also match."""
    from hinge.layers.recurrent_kernels.conv_prefill import conv_prefill_exact

    x, weight, bias, windows, cu, act = _packed_prefill(model, window_dtype, seed=7)
    got = conv_prefill_exact(x, weight, bias, windows, cu, activation=act)
    want = torch_causal_conv1d(x, weight, bias, windows, cu, activation=act, deterministic=True)
    assert torch.equal(got.out, want.out), f"max diff {(got.out.float() - want.out.float()).abs().max():.3g}"
    assert torch.equal(got.final_window, want.final_window)
