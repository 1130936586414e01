"""Attention-logit softcap: read from the HF config (``attn_logit_softcapping``) into every
``AttentionLayer``, applied by the torch reference as the float64 oracle does, and a plan with a
backend that does not declare it is refused with the reason."""

from __future__ import annotations

import json

import pytest
import torch

from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.config import load_config
from hinge.contracts import AttentionBackend
from hinge.plugins.manager import get_plugin_manager
from hinge.plugins.plan import PlanError, resolve_plan
from hinge.testing.checkpoints import make_tiny_checkpoint
from hinge.testing.paged_steps import PagedSteps
from hinge.testing.reference import reference_attention

CAP = 2.0  # NOTE: small enough that tanh bends the tiny models' scores (an ignored cap shows)


class OracleAttention(AttentionBackend):
    """Writes KV at ``out_loc`` and attends with the kit's float64 oracle."""

    def prepare_metadata(self, batch):
        return None

    def forward(self, q, k, v, layer, kv, batch):
        kv.k[layer.kv_layer_id].index_copy_(0, batch.out_loc, k)
        kv.v[layer.kv_layer_id].index_copy_(0, batch.out_loc, v)
        return reference_attention(q, kv, layer, batch).to(q.dtype)


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    return make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("softcap"), seed=3,
                                attn_logit_softcapping=CAP)


def _hinge(path):
    from hinge.builtin.no_quant import NoQuantizer
    from hinge.models.loader import load_model
    from hinge.plugins.specs import BuildContext

    build = BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=16)
    return load_model(path, device="cpu", dtype=torch.float32, quantizer=NoQuantizer(None, build),
                      progress=False)


def _logits(model, backend, ids):
    return PagedSteps(model, backend).step([("a", ids)]).logits


def test_every_attention_layer_reads_the_cap_from_the_config(capped, tmp_path):
    assert json.loads((capped / "config.json").read_text())["attn_logit_softcapping"] == CAP
    assert {layer.logit_softcap for layer in _hinge(capped).attention_layers} == {CAP}
    plain = make_tiny_checkpoint("qwen3", tmp_path / "plain", seed=3)
    assert {layer.logit_softcap for layer in _hinge(plain).attention_layers} == {None}


def test_a_hybrid_model_reads_the_cap_too(tmp_path):
    path = make_tiny_checkpoint("qwen3_5", tmp_path, seed=1, attn_logit_softcapping=CAP)
    assert {layer.logit_softcap for layer in _hinge(path).attention_layers} == {CAP}


@pytest.mark.parametrize("deterministic", [False, True], ids=["sdpa-path", "fixed-split"])
def test_the_torch_reference_applies_the_cap_as_the_float64_oracle_does(capped, tmp_path, deterministic):
    from hinge.plugins.specs import BuildContext

    model = _hinge(capped)
    ids = torch.randint(0, 100, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    build = BuildContext(device="cpu", dtype=torch.float32, deterministic=deterministic, page_size=16)
    ours = _logits(model, TorchAttentionBackend(None, build), ids)
    oracle = _logits(model, OracleAttention(), ids)
    err = float((ours - oracle).abs().max())
    assert err <= 1e-4, f"torch backend with softcap differs from the float64 oracle by {err:.3g}"
    uncapped = make_tiny_checkpoint("qwen3", tmp_path / "plain", seed=3)
    gap = float((_logits(_hinge(uncapped), OracleAttention(), ids) - oracle).abs().max())
    assert gap > 100 * max(err, 1e-6), f"the cap changed the logits by only {gap:.3g}: the test cannot fail"


def test_a_backend_without_softcap_is_refused_for_a_capped_model(capped):
    pm = get_plugin_manager(entry_points=[])
    config = load_config(env={}, overrides={"model": str(capped), "device": "cuda",
                                            "attention": "flashinfer", "cache": "none"})
    with pytest.raises(PlanError) as err:
        resolve_plan(config, pm, device_capability=(9, 0))
    assert ("the model caps attention logits (attn_logit_softcapping = 2.0) and attention backend "
            "'flashinfer' (hinge) does not support a logit softcap") in str(err.value)
    ok = resolve_plan(config.model_copy(update={"attention": "torch"}), pm, device_capability=(9, 0))
    assert ok.attention.name == "torch"


def test_per_phase_the_decode_backend_is_checked_too(capped):
    pm = get_plugin_manager(entry_points=[])
    config = load_config(env={}, overrides={"model": str(capped), "device": "cuda", "cache": "none",
                                            "attention_prefill": "torch",
                                            "attention_decode": "triton"})
    with pytest.raises(PlanError, match="'triton' \\(hinge\\) does not support a logit softcap"):
        resolve_plan(config, pm, device_capability=(9, 0))
