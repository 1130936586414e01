"""The ``flashinfer`` backend on CPU, with a fake flashinfer module (``fake_flashinfer``): the
attention contract through the kernels' documented semantics, wrapper bookkeeping, warm-up, the
lazy import and its JIT cache directory. The real kernels: ``test_flashinfer_gpu.py``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fake_flashinfer import FakeFlashInfer

from hinge.builtin.flashinfer_attention import FlashInferAttentionBackend
from hinge.builtin.flashinfer_options import FlashInferOptions
from hinge.builtin.flashinfer_runtime import (
    ENV_CACHE_BASE,
    FlashInferUnavailable,
    jit_cache_dir,
    load_flashinfer,
)
from hinge.builtin.plugin import FLASHINFER_ATTENTION
from hinge.contracts import AttentionLayer, KVCache
from hinge.plugins.specs import AttentionBackendSpec, BuildContext
from hinge.testing import AttentionBackendContract
from hinge.testing.batches import build_batch
from hinge.testing.reference import reference_attention

D = 64


def fake_spec(fake: FakeFlashInfer) -> AttentionBackendSpec:
    """The real spec, built on the fake module and claiming CPU and float32 (what the fake runs)."""
    caps = FLASHINFER_ATTENTION.capabilities.model_copy(
        update={"devices": frozenset({"cpu"}), "dtypes": frozenset({"float32"})})
    return AttentionBackendSpec(
        name="flashinfer-fake", capabilities=caps, options_model=FlashInferOptions,
        factory=lambda options, build: FlashInferAttentionBackend(options, build, flashinfer=fake))


def backend(fake: FakeFlashInfer, page_size: int = 16, **options) -> FlashInferAttentionBackend:
    build = BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=page_size)
    return FlashInferAttentionBackend(FlashInferOptions(workspace_mb=16, **options), build,
                                      flashinfer=fake)


def layer(kv_layer_id=0, heads=4, kv_heads=2, window=None) -> AttentionLayer:
    return AttentionLayer(kv_layer_id=kv_layer_id, num_heads=heads, num_kv_heads=kv_heads,
                          head_dim=D, scale=D**-0.5, sliding_window=window)


class TestFlashInferOnFakeKernels(AttentionBackendContract):
    """Prefill, cached prefix, decode, mixed, verify, GQA layouts, page sizes 1/16/64, sliding
    window: the backend's layout and plans give the oracle's answer through flashinfer's API."""

    @pytest.fixture
    def spec(self):
        return fake_spec(FakeFlashInfer())

    @pytest.fixture
    def options(self):
        return {"workspace_mb": 16}


def test_importing_the_plugin_and_the_backend_module_does_not_import_flashinfer():
    code = ("import sys, hinge.builtin.plugin, hinge.builtin.flashinfer_attention, "
            "hinge.plugins.auto_attention; print('flashinfer' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


def test_missing_flashinfer_is_one_error_naming_the_package_and_the_way_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # makes `import flashinfer` fail
    build = BuildContext(device="cpu", dtype=torch.bfloat16, deterministic=False, page_size=16)
    with pytest.raises(FlashInferUnavailable) as err:
        FlashInferAttentionBackend(None, build)
    message = str(err.value)
    assert isinstance(err.value, ValueError), "the CLI turns ValueError into one error line"
    assert "flashinfer-python" in message and "attention=torch" in message
    assert "\n" not in message


def test_the_pool_reaches_flashinfer_as_nhd_views_of_the_same_memory():
    fake = FakeFlashInfer()
    attn = backend(fake, page_size=4)
    case = build_batch([5, 0], [1, 9], layer=layer(kv_layer_id=1), page_size=4)
    case.batch.attn_metadata = attn.prepare_metadata(case.batch)
    attn.forward(case.q, case.k, case.v, case.layer, case.kv, case.batch)
    _, _, (k4, v4) = fake.runs[-1]
    pool_k, pool_v = case.kv.k[1], case.kv.v[1]
    assert k4.shape == (case.kv.num_pages, 4, 2, D)
    assert k4.data_ptr() == pool_k.data_ptr() and v4.data_ptr() == pool_v.data_ptr()
    assert k4._base is pool_k or k4._base is pool_k._base, "a view of the pool, not a copy"


def test_layers_sharing_a_signature_share_one_plan_per_step():
    fake = FakeFlashInfer()
    attn = backend(fake)
    layers = [layer(0), layer(1), layer(2, window=8)]
    case = build_batch([3, 20], [6, 1], layer=layers[2], page_size=16)
    attn.warmup(layers, case.kv)
    fake.plans.clear()
    fake.runs.clear()
    case.batch.attn_metadata = attn.prepare_metadata(case.batch)
    assert len(fake.plans) == 2, "one plan per signature (full attention, window 8)"
    assert sorted(p["window_left"] for _, p in fake.plans) == [-1, 7]
    for lay in layers:
        out = attn.forward(case.q, case.k, case.v, lay, case.kv, case.batch)
        if lay is layers[2]:
            expected = reference_attention(case.q, case.kv, lay, case.batch)
            assert (out.double() - expected).abs().max() < 1e-5
    assert len(fake.runs) == 3 and len(fake.plans) == 2, "forward plans nothing already planned"


@pytest.mark.parametrize("kv_heads, option, tensor_cores", [
    (2, "auto", False), (1, "auto", True), (2, "on", True), (1, "off", False)])
def test_decode_steps_run_the_decode_wrapper_and_other_steps_the_prefill_wrapper(
        kv_heads, option, tensor_cores):
    fake = FakeFlashInfer()
    attn = backend(fake, decode_tensor_cores=option)
    lay = layer(heads=4, kv_heads=kv_heads)
    for prefix, extend, kind in (([7, 30], [1, 1], "decode"), ([7, 0], [1, 5], "prefill"),
                                 ([7, 30], [4, 4], "prefill")):
        case = build_batch(prefix, extend, layer=lay, page_size=16)
        case.batch.attn_metadata = attn.prepare_metadata(case.batch)
        out = attn.forward(case.q, case.k, case.v, lay, case.kv, case.batch)
        wrapper = fake.runs[-1][0]
        assert wrapper.kind == kind and not wrapper.use_cuda_graph
        if kind == "decode":
            assert wrapper.use_tensor_cores == tensor_cores
        else:
            assert wrapper.planned["causal"] and wrapper.backend == "fa2"
        expected = reference_attention(case.q, case.kv, lay, case.batch)
        assert (out.double() - expected).abs().max() < 1e-5


@pytest.mark.parametrize("option, rows, disabled", [
    ("planner", 66, False), ("never", 2, True), ("auto", 65, False), ("auto", 66, True),
    (None, 65, False), (None, 66, True)])  # None: the default, auto
def test_decode_split_kv_is_disabled_as_the_option_says_once_requests_fill_the_sms(option, rows, disabled):
    """``decode_split_kv``: 2 KV heads a layer and the CPU's 132 SMs, so ``auto`` stops splitting
    at 66 requests; prefill plans never take the flag; the results are the reference's either way."""
    fake = FakeFlashInfer()
    attn = backend(fake, **({} if option is None else {"decode_split_kv": option}))
    lay = layer(heads=4, kv_heads=2)
    case = build_batch([5] * rows, [1] * rows, layer=lay, page_size=16)
    case.batch.attn_metadata = attn.prepare_metadata(case.batch)
    out = attn.forward(case.q, case.k, case.v, lay, case.kv, case.batch)
    wrapper = fake.runs[-1][0]
    assert wrapper.kind == "decode" and wrapper.disable_split_kv is disabled
    assert (out.double() - reference_attention(case.q, case.kv, lay, case.batch)).abs().max() < 1e-5
    prefill = build_batch([5] * 2, [3] * 2, layer=lay, page_size=16)
    prefill.batch.attn_metadata = attn.prepare_metadata(prefill.batch)
    attn.forward(prefill.q, prefill.k, prefill.v, lay, prefill.kv, prefill.batch)
    assert fake.runs[-1][0].kind == "prefill" and "disable_split_kv" not in fake.plans[-1][1]


def test_eager_wrappers_are_reused_across_steps_and_planned_once_per_step():
    fake = FakeFlashInfer()
    attn = backend(fake)
    lay = layer()
    for _ in range(3):
        case = build_batch([9, 2], [1, 1], layer=lay)
        case.batch.attn_metadata = attn.prepare_metadata(case.batch)
        attn.forward(case.q, case.k, case.v, lay, case.kv, case.batch)
    assert len(fake.wrappers) == 1 and len(fake.plans) == 3


def test_warmup_runs_prefill_and_decode_for_every_signature_writing_only_page_0():
    fake = FakeFlashInfer()
    attn = backend(fake, page_size=4)
    layers = [layer(0), layer(1, heads=8, kv_heads=1), layer(2)]
    kv = KVCache([torch.randn(6 * 4, lay.num_kv_heads, D) for lay in layers],
                 [torch.randn(6 * 4, lay.num_kv_heads, D) for lay in layers], page_size=4)
    before = [t.clone() for t in (*kv.k, *kv.v)]
    attn.warmup(layers, kv)
    ran = {(w.kind, w.planned["heads"]) for w, _, _ in fake.runs}
    assert ran == {("prefill", 4), ("decode", 4), ("prefill", 8), ("decode", 8)}
    for after, old in zip((*kv.k, *kv.v), before, strict=True):
        assert torch.equal(after[4:], old[4:]), "warm-up wrote outside page 0"
    assert len(attn.signatures) == 2


def test_jit_cache_base_is_set_before_flashinfer_is_imported(tmp_path, monkeypatch):
    package = tmp_path / "site" / "flashinfer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import os\nBASE = os.environ.get('FLASHINFER_WORKSPACE_BASE')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(ENV_CACHE_BASE, str(tmp_path / "elsewhere"))
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    try:
        module = load_flashinfer(str(tmp_path / "cache"))
        assert module.BASE == str(tmp_path / "cache")
        assert jit_cache_dir() == tmp_path / "cache" / ".cache" / "flashinfer"
    finally:
        sys.modules.pop("flashinfer", None)


def test_a_cache_base_asked_after_flashinfer_was_imported_is_a_warning(monkeypatch, caplog, tmp_path):
    monkeypatch.setitem(sys.modules, "flashinfer", FakeFlashInfer())
    monkeypatch.setenv(ENV_CACHE_BASE, str(tmp_path / "first"))
    with caplog.at_level(logging.WARNING, logger="hinge.builtin.flashinfer_runtime"):
        load_flashinfer(str(tmp_path / "second"))
    assert "imported before its JIT cache base could be set" in caplog.text
    assert os.environ[ENV_CACHE_BASE] == str(tmp_path / "first")


def test_the_jit_cache_is_under_flashinfer_workspace_base_else_the_home_directory():
    assert jit_cache_dir({}) == Path.home() / ".cache" / "flashinfer"
    assert jit_cache_dir({ENV_CACHE_BASE: "/data"}) == Path("/data/.cache/flashinfer")
