"""The attention contract passes a correct backend and fails broken ones (it can fail)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from hinge.builtin.plugin import TORCH_ATTENTION
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.plugins import AttentionCapabilities, BuildContext
from hinge.testing.attention_contract import (
    AttentionBackendContract,
    check_against_reference,
    make_layer,
)
from hinge.testing.batches import build_batch
from hinge.testing.reference import reference_attention


def backend(cls=TorchAttentionBackend, page_size=16, deterministic=False):
    return cls(None, BuildContext("cpu", torch.float32, deterministic, page_size))


class IgnoresPageTable(TorchAttentionBackend):
    """Assumes a request's pages are contiguous from its first page."""

    def prepare_metadata(self, batch):
        meta = super().prepare_metadata(batch)
        for r in meta.requests:
            r.kv_slots = r.kv_slots[0] + torch.arange(r.seq_len)
        return meta


class IgnoresSlidingWindow(TorchAttentionBackend):
    def forward(self, q, k, v, layer, kv, batch):
        return super().forward(q, k, v, dataclasses.replace(layer, sliding_window=None), kv, batch)


class BitsDependOnBatchSize(TorchAttentionBackend):
    def forward(self, q, k, v, layer, kv, batch):
        return super().forward(q, k, v, layer, kv, batch) * (1 + 1e-7 * batch.batch_size)


class WritesPageZero(TorchAttentionBackend):
    def forward(self, q, k, v, layer, kv, batch):
        kv.k[layer.kv_layer_id][0] = 0.0
        return super().forward(q, k, v, layer, kv, batch)


def test_reference_attention_equals_sdpa_for_one_request_in_float64():
    case = build_batch([0], [23], layer=make_layer(16), page_size=4)
    ours = reference_attention(case.q, case.kv, case.layer, case.batch, k=case.k, v=case.v)
    q, k, v = (t.double().transpose(0, 1) for t in (case.q, case.k, case.v))
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(0, 1)
    assert torch.allclose(ours, sdpa, atol=1e-12)


def test_build_batch_gives_disjoint_shuffled_pages_and_consistent_slots():
    case = build_batch([5, 0, 20], [1, 9, 4], page_size=4)
    pt, ps = case.batch.page_table, 4
    pages = [int(p) for i, n in enumerate([2, 3, 6]) for p in pt[i, :n]]
    assert len(set(pages)) == len(pages) and 0 not in pages
    assert pages != sorted(pages), "pages should not be handed out in order"
    for i, (prefix, extend) in enumerate(zip(case.batch.prefix_lens_cpu, case.batch.extend_lens_cpu, strict=True)):
        for t, pos in enumerate(range(prefix, prefix + extend)):
            slot = int(case.batch.out_loc[case.rows_of(i)][t])
            assert slot == int(pt[i, pos // ps]) * ps + pos % ps
    assert case.batch.phase == "mixed" and case.batch.positions.tolist()[:2] == [5, 0]


def test_a_correct_backend_passes_the_reference_check():
    case = build_batch([16, 0, 3], [1, 19, 5], layer=make_layer(16))
    check_against_reference(backend(), case, atol=2e-5)


def test_a_backend_that_ignores_the_page_table_fails():
    case = build_batch([16, 0, 30], [1, 19, 5], layer=make_layer(16))
    with pytest.raises(AssertionError, match="max \\|out - reference\\|"):
        check_against_reference(backend(IgnoresPageTable), case, atol=2e-5)


def test_a_backend_writing_outside_out_loc_fails():
    case = build_batch([3], [4], layer=make_layer(16))
    with pytest.raises(AssertionError, match="wrote KV slots outside batch.out_loc"):
        check_against_reference(backend(WritesPageZero), case, atol=2e-5)


def _contract_for(cls, **caps):
    contract = AttentionBackendContract()
    contract._build_component = lambda **kw: backend(cls, kw.get("page_size", 16),
                                                     kw.get("deterministic", False))
    spec = TORCH_ATTENTION.model_copy(update={"capabilities": AttentionCapabilities(**caps)})
    return contract, spec


def _check(contract):
    def run(prefix, extend, *, backend=None, sliding_window=None, **kw):
        layer = make_layer(16, sliding_window=sliding_window)
        case = build_batch(prefix, extend, layer=layer, **kw)
        check_against_reference(backend or contract._build_component(), case, 2e-5)

    return run


def test_a_sliding_window_claim_is_executed_and_fails_when_false():
    contract, spec = _contract_for(IgnoresSlidingWindow, sliding_window=True)
    with pytest.raises(AssertionError):
        contract.test_sliding_window_matches_reference(spec, _check(contract))


def test_a_sliding_window_that_is_not_claimed_is_not_tested():
    contract, spec = _contract_for(IgnoresSlidingWindow, sliding_window=False)
    with pytest.raises(pytest.skip.Exception):
        contract.test_sliding_window_matches_reference(spec, _check(contract))


def test_a_batch_invariance_claim_fails_when_bits_depend_on_the_batch():
    contract, spec = _contract_for(BitsDependOnBatchSize, batch_invariant=True)
    with pytest.raises(AssertionError, match="changed when batched"):
        contract.test_batch_invariant_claim_holds_across_batches_and_chunks(
            spec, 16, 16, torch.float32, "cpu")


def test_a_claimed_page_size_is_run_with_that_page_size():
    contract, spec = _contract_for(IgnoresPageTable, page_sizes=frozenset({1}))
    with pytest.raises(AssertionError, match="page_size 1"):
        contract.test_every_claimed_page_size(spec, _check(contract))


class WritesThePassedKV(TorchAttentionBackend):
    """Claims kv_written_by_layer but stores the k/v it is passed anyway."""

    def forward(self, q, k, v, layer, kv, batch, *, kv_saved=False):
        return super().forward(q, k, v, layer, kv, batch)


class AttendsOverThePassedKV(TorchAttentionBackend):
    """Claims kv_written_by_layer but attends over the k/v passed (here: the new rows' copy)."""

    def forward(self, q, k, v, layer, kv, batch, *, kv_saved=False):
        out = super().forward(q, k, v, layer, kv, batch, kv_saved=kv_saved)
        return out + 0 * (k.sum() + v.sum())  # NaN k/v reach the output


@pytest.mark.parametrize("cls, ok", [(TorchAttentionBackend, True), (WritesThePassedKV, False),
                                     (AttendsOverThePassedKV, False)])
def test_the_kv_written_by_layer_claim_holds_for_the_torch_backend_and_fails_for_broken_ones(cls, ok):
    contract, spec = _contract_for(cls, kv_written_by_layer=True)
    if ok:
        contract.test_kv_written_by_the_layer_is_attended_and_not_written_again(
            spec, backend(cls), 16, 16, torch.float32, "cpu")
        return
    with pytest.raises(AssertionError):
        contract.test_kv_written_by_the_layer_is_attended_and_not_written_again(
            spec, backend(cls), 16, 16, torch.float32, "cpu")


def test_a_kv_written_by_layer_claim_that_is_not_made_is_not_tested():
    contract, spec = _contract_for(TorchAttentionBackend, kv_written_by_layer=False)
    with pytest.raises(pytest.skip.Exception):
        contract.test_kv_written_by_the_layer_is_attended_and_not_written_again(
            spec, backend(), 16, 16, torch.float32, "cpu")
