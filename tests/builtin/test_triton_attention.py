"""The ``triton`` attention backend: the contract kit (CPU under Triton's interpreter, and CUDA
with its graph claims), fold == split bits, and batch invariance at absolute key positions.

CPU tests run the real kernels with ``TRITON_INTERPRET=1`` (numpy); they skip where triton is
not installed. GPU tests carry the ``gpu`` marker and skip without CUDA.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from triton_cases import (  # noqa: E402
    assert_same_query_bits,
    make_backend,
    make_layer,
    needs_cuda,
    run,
)

from hinge.builtin.plugin import TRITON_ATTENTION  # noqa: E402
from hinge.forward import KVCache  # noqa: E402
from hinge.plugins.specs import OptionsError  # noqa: E402
from hinge.testing import AttentionBackendContract  # noqa: E402
from hinge.testing.attention_contract import make_layer as kit_layer  # noqa: E402
from hinge.testing.batches import build_batch  # noqa: E402
from hinge.testing.graphs import check_graph_replay  # noqa: E402
from hinge.testing.reference import reference_attention  # noqa: E402


@pytest.fixture
def interpreter(monkeypatch):
    """Run the kernels with Triton's interpreter on CPU tensors."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


class TestTritonAttentionUnderInterpreter(AttentionBackendContract):
    """The kit on CPU, kernels interpreted; 64-key splits so short requests span several."""

    @pytest.fixture
    def spec(self):
        return TRITON_ATTENTION

    @pytest.fixture
    def options(self):
        return {"split_size": 64}

    @pytest.fixture
    def device(self):
        return "cpu"

    @pytest.fixture(autouse=True)
    def _interpret(self, interpreter):
        return None

    @pytest.mark.parametrize("phase", ["decode", "prefill"])
    def test_graph_protocol_pads_and_clears_under_interpreter(self, build_component, head_dim,
                                                              page_size, dtype, phase):
        """The kit's graph check on CPU (replay = rerun): captured at 4 requests, replayed with
        4, 3, 1 and 2 live; padded rows finite (they read nothing), no write outside out_loc."""
        check_graph_replay(build_component(device="cpu"), phase, kit_layer(head_dim), page_size,
                           dtype, device="cpu")

    # the kit's CUDA checks run in TestTritonAttentionOnCuda, on compiled kernels
    def test_claimed_cuda_device_matches_reference(self):
        pytest.skip("checked by TestTritonAttentionOnCuda")

    def _graph_test(self, *args):
        pytest.skip("checked by TestTritonAttentionOnCuda")


@pytest.mark.gpu
@needs_cuda
class TestTritonAttentionOnCuda(AttentionBackendContract):
    """The whole kit on CUDA, its decode and prefill graph claims included."""

    @pytest.fixture
    def spec(self):
        return TRITON_ATTENTION


# ---------------------------------------------------------------------------------------------
# CPU: one arithmetic whatever the step
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window, page_size", [(None, 16), (50, 1), (None, 64)])
def test_fold_and_split_modes_give_identical_bits(interpreter, window, page_size):
    """The split partials folded by the combine kernel equal the splits folded in registers
    (and the float64 oracle), for every page size the kit tries."""
    layer = make_layer(window=window)
    prefix, extend = [150, 0, 70, 131], [1, 90, 4, 1]
    outs = []
    for mode in ("never", "always"):
        case = build_batch(prefix, extend, layer=layer, seeds=[7, 8, 9, 10], page_size=page_size)
        outs.append(run(make_backend(split_size=64, split_kv=mode, page_size=page_size), case))
    expected = reference_attention(case.q, case.kv, layer, case.batch, k=case.k, v=case.v)
    assert float((outs[0].double() - expected).abs().max()) < 2e-5
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("heads, window", [((4, 2), None), ((6, 2), 100)],
                         ids=["gqa2-causal", "gqa3-window100"])
def test_a_query_has_the_same_bits_alone_batched_chunked_and_as_a_decode_row(interpreter, heads,
                                                                              window):
    """Fixed splits at absolute positions: prefill row == decode row (a cache hit == a cold run)."""
    layer = make_layer(*heads, window=window)
    assert_same_query_bits(make_backend(split_size=64), layer, 200)


def test_nan_in_reserved_page_and_foreign_slots_never_reaches_a_live_row(interpreter):
    """The kit fills every unused slot (page 0 included) with NaN; a mixed batch stays finite."""
    out = run(make_backend(split_size=64, split_kv="always"),
              build_batch([0, 77, 130], [70, 1, 3], layer=make_layer(), spare_pages=6))
    assert torch.isfinite(out).all()


def test_warmup_runs_every_path_and_writes_no_kv_slot(interpreter):
    layers = [make_layer(), make_layer(window=8), make_layer(8, 2, 32)]
    pool = [torch.randn(64, 2, d) for d in (16, 16, 32) for _ in range(2)]
    kv = KVCache(pool[0::2], pool[1::2], 16)
    layers = [dataclasses.replace(layer, kv_layer_id=i) for i, layer in enumerate(layers)]
    before = [t.clone() for t in pool]
    make_backend().warmup(layers, kv)
    assert all(torch.equal(a, b) for a, b in zip(pool, before, strict=True))


def test_cpu_tensors_without_the_interpreter_are_refused_naming_the_switch(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    case = build_batch([3], [2], layer=make_layer())
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        run(make_backend(), case)


def test_split_size_must_be_a_multiple_of_the_key_block():
    with pytest.raises(OptionsError, match="multiple of 64"):
        TRITON_ATTENTION.validate_options({"split_size": 100})


def test_spec_claims_cuda_only_with_decode_graphs_and_batch_invariance():
    """Prefill graphs stay unclaimed until their H200 replay matches eager (see the xfail in
    test_triton_attention_graphs.py), and the plan says why."""
    caps = TRITON_ATTENTION.capabilities
    assert caps.devices == frozenset({"cuda"})
    assert caps.decode_graph and not caps.prefill_graph and "prefill" in caps.graph_note
    assert caps.batch_invariant and caps.sliding_window


# ---------------------------------------------------------------------------------------------
# CUDA: the compiled kernels
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("window", [None, 300], ids=["causal", "window300"])
def test_cuda_query_bits_alone_batched_chunked_and_decode(dtype, window):
    """Default 256-key splits, a 1100-token request (5 splits), Qwen3-8B's head shape."""
    layer = make_layer(32, 8, 128, window=window)
    assert_same_query_bits(make_backend("cuda", dtype), layer, 1100, device="cuda", dtype=dtype)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_fold_and_split_modes_give_identical_bits(dtype):
    layer = make_layer(32, 8, 128)
    outs = []
    for mode in ("never", "always"):
        case = build_batch([2000, 0, 700, 1300], [1, 300, 4, 1], layer=layer, dtype=dtype,
                           device="cuda", seeds=[7, 8, 9, 10])
        outs.append(run(make_backend("cuda", dtype, split_kv=mode), case))
    assert torch.equal(outs[0], outs[1])
