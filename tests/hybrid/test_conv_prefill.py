"""The one-kernel prefill conv (``conv_prefill``) on CPU under Triton's interpreter: for a packed
varlen batch (requests longer and shorter than the window, fresh windows) its outputs and final
windows are the torch reference conv's (``torch_causal_conv1d``), and the fla kernels send a
default-mode CUDA prefill to it while track-state steps keep the reference. CUDA bits and speed
are GPU checks (``test_conv_in_pool_gpu.py``)."""

from __future__ import annotations

import pytest
import torch
from hybrid_harness import interpreted_kernel

from hinge.layers.recurrent_kernels.torch_ref import torch_causal_conv1d
from hinge.testing.triton_interpreter import patch_interpreter

pytest.importorskip("triton")


@pytest.fixture
def conv_prefill(monkeypatch):
    patch_interpreter(monkeypatch)
    return interpreted_kernel("conv_prefill").conv_prefill


def _batch(lens, c=300, k=4, dtype=torch.float32, window_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lens)
    x = torch.randn(t, c + 3, generator=gen).to(dtype)[:, 3:]  # a view, as the in_proj split gives
    weight = torch.randn(c, k, generator=gen).to(dtype)
    bias = torch.randn(c, generator=gen).to(dtype)
    window = torch.randn(len(lens), c, k - 1, generator=gen).to(window_dtype or dtype)
    window[1] = 0  # a fresh request
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return x, weight, bias, window, cu


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_outputs_and_final_windows_are_the_reference_convs(conv_prefill, activation, with_bias):
    """Requests of 5, 1, 2 and 9 tokens with K = 4: the two short ones end inside their window."""
    x, weight, bias, window, cu = _batch([5, 1, 2, 9])
    bias = bias if with_bias else None
    got = conv_prefill(x, weight, bias, window, cu, activation=activation)
    want = torch_causal_conv1d(x, weight, bias, window, cu, activation=activation)
    assert got.out.shape == want.out.shape and got.final_window.shape == want.final_window.shape
    torch.testing.assert_close(got.out, want.out, rtol=1e-6, atol=1e-6)
    assert torch.equal(got.final_window, want.final_window)  # copies of inputs: exact


def test_bfloat16_rows_are_the_references_to_one_rounding(conv_prefill):
    """(A float32 window's cast to bfloat16 is a GPU check: the interpreter does not round it as
    CUDA does, to nearest even.)"""
    x, weight, bias, window, cu = _batch([3, 7, 1], dtype=torch.bfloat16)
    got = conv_prefill(x, weight, bias, window, cu, activation="silu")
    want = torch_causal_conv1d(x, weight, bias, window, cu, activation="silu")
    assert got.out.dtype == torch.bfloat16 and got.final_window.dtype == torch.bfloat16
    torch.testing.assert_close(got.out.float(), want.out.float(), rtol=1.6e-2, atol=1.6e-2)
    assert torch.equal(got.final_window, want.final_window)


def test_shapes_it_cannot_take_are_refused_naming_them(conv_prefill):
    x, weight, bias, window, cu = _batch([2, 2])
    with pytest.raises(ValueError, match="conv_prefill needs"):
        conv_prefill(x, weight, bias, window[:1], cu)
    with pytest.raises(ValueError, match="activation"):
        conv_prefill(x, weight, bias, window, cu, activation="gelu")


def test_fla_kernels_send_default_mode_prefill_to_it_and_keep_the_reference_when_tracking(monkeypatch):
    """``FlaRecurrentKernels.causal_conv1d`` (fla itself is not needed for the conv)."""
    from hinge.layers import fast_triton
    from hinge.layers.recurrent_kernels import fla_kernels

    calls = []
    monkeypatch.setattr(fla_kernels, "_import_fla", lambda: (None, None))
    monkeypatch.setattr(fast_triton, "enabled", lambda x, *a, **k: True)
    monkeypatch.setattr(fla_kernels, "_conv_prefill", lambda: lambda *a, **k: calls.append(k) or "fast")
    kernels = fla_kernels.FlaRecurrentKernels()
    x, weight, bias, window, cu = _batch([3, 2])
    assert kernels.causal_conv1d(x, weight, None, window, cu, activation="silu") == "fast"
    tracked = kernels.causal_conv1d(x, weight, None, window, cu, activation="silu", track_states=True)
    assert tracked.position_windows is not None and len(calls) == 1
    monkeypatch.setattr(fast_triton, "enabled", lambda x, *a, **k: False)  # =0
    assert kernels.causal_conv1d(x, weight, None, window, cu, activation="silu") != "fast"


@pytest.fixture
def conv_prefill_exact(monkeypatch):
    patch_interpreter(monkeypatch)
    return interpreted_kernel("conv_prefill").conv_prefill_exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation, with_bias", [(None, False), ("silu", True), ("silu", False)])
def test_the_exact_variant_gives_the_deterministic_reference_bits(conv_prefill_exact, dtype,
                                                                  activation, with_bias):
    """Deterministic mode's prefill conv: bit for bit the torch reference (whose rows decode's
    ``conv_in_pool_exact`` also matches), for requests longer and shorter than the window."""
    x, weight, bias, window, cu = _batch([5, 1, 2, 9, 3], dtype=dtype, seed=3)
    bias = bias if with_bias else None
    got = conv_prefill_exact(x, weight, bias, window, cu, activation=activation)
    want = torch_causal_conv1d(x, weight, bias, window, cu, activation=activation, deterministic=True)
    assert got.out.dtype == dtype and torch.equal(got.out, want.out)
    assert torch.equal(got.final_window, want.final_window)
    with pytest.raises(ValueError, match="activation"):
        conv_prefill_exact(x, weight, bias, window, cu, activation="gelu")


def test_deterministic_torch_kernels_send_cuda_prefill_to_the_exact_variant(monkeypatch):
    """``TorchRecurrentKernels(deterministic=True)``: a prefill without per-position windows goes
    to ``conv_prefill_exact`` where the fast kernels run; tracking steps and default mode keep the
    reference."""
    from hinge.layers import fast_triton
    from hinge.layers.recurrent_kernels import conv_prefill as module
    from hinge.layers.recurrent_kernels.torch_ref import TorchRecurrentKernels

    calls = []
    monkeypatch.setattr(fast_triton, "enabled", lambda x, *a, **k: True)
    monkeypatch.setattr(module, "conv_prefill_exact", lambda *a, **k: calls.append(k) or "exact")
    x, weight, bias, window, cu = _batch([3, 2])
    det = TorchRecurrentKernels(deterministic=True)
    assert det.causal_conv1d(x, weight, None, window, cu, activation="silu") == "exact"
    assert calls == [{"activation": "silu"}]
    tracked = det.causal_conv1d(x, weight, None, window, cu, activation="silu", track_states=True)
    assert tracked.position_windows is not None
    assert TorchRecurrentKernels().causal_conv1d(x, weight, None, window, cu) != "exact"
    monkeypatch.setattr(fast_triton, "enabled", lambda x, *a, **k: False)  # CPU, or =0
    assert det.causal_conv1d(x, weight, None, window, cu, activation="silu") != "exact"
    assert len(calls) == 1
