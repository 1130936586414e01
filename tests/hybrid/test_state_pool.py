"""StatePool: slot lifecycle, sizing, per-step read/write and per-position state writes."""

from __future__ import annotations

import pytest
import torch

from hinge.engine.state_pool import PositionStates, RecurrentLayerSpec, StatePool

LAYERS = [
    RecurrentLayerSpec(layer_id=0, state_id=0, conv_dim=12, conv_kernel=4, ssm_shape=(2, 3, 5)),
    RecurrentLayerSpec(layer_id=2, state_id=1, conv_dim=8, conv_kernel=3),
]


def _pool(num_slots=4, ssm_dtype=torch.float32):
    return StatePool(LAYERS, num_slots, conv_dtype=torch.bfloat16, ssm_dtype=ssm_dtype)


def test_slots_are_handed_out_lowest_first_never_slot_zero_and_wait_when_full():
    pool = _pool()
    assert [pool.allocate() for _ in range(3)] == [1, 2, 3]
    assert not pool.can_allocate()
    pool.free(2)
    assert pool.can_allocate() and pool.allocate() == 2
    with pytest.raises(AssertionError, match="double free"):
        pool.free(0)


def test_allocated_slot_is_zeroed_for_a_fresh_request():
    pool = _pool()
    slot = pool.allocate()
    pool.conv[0][slot].fill_(3.0)
    pool.ssm[0][slot].fill_(2.0)
    pool.free(slot)
    assert pool.allocate() == slot
    assert pool.conv[0][slot].abs().sum() == 0 and pool.ssm[0][slot].abs().sum() == 0


@pytest.mark.parametrize("ssm_dtype", [torch.float32, torch.bfloat16])
def test_bytes_per_slot_counts_every_tensor_of_one_slot(ssm_dtype):
    pool = _pool(num_slots=5, ssm_dtype=ssm_dtype)
    actual = sum(t[0].numel() * t.element_size() for t in pool.conv + pool.ssm if t is not None)
    assert StatePool.bytes_per_slot(LAYERS, torch.bfloat16, ssm_dtype) == actual
    assert pool.nbytes == 5 * actual
    assert pool.ssm[0].dtype == ssm_dtype and pool.ssm[1] is None


def test_read_zeroes_fresh_rows_and_write_casts_into_the_pool_dtype():
    pool = _pool()
    slots = torch.tensor([1, 2])
    conv = torch.randn(2, 12, 3)
    ssm = torch.randn(2, 2, 3, 5, dtype=torch.float64)
    pool.write(0, slots, conv, ssm)
    assert pool.ssm[0].dtype == torch.float32
    torch.testing.assert_close(pool.ssm[0][2], ssm[1].float())
    got_conv, got_ssm = pool.read(0, slots, fresh=torch.tensor([True, False]))
    assert got_conv[0].abs().sum() == 0 and got_ssm[0].abs().sum() == 0
    torch.testing.assert_close(got_conv[1], conv[1].to(torch.bfloat16))
    torch.testing.assert_close(got_ssm[1], ssm[1].float())


def test_copy_slot_and_position_state_write_keep_the_chosen_state():
    pool = _pool()
    a, b = pool.allocate(), pool.allocate()
    pool.write(1, torch.tensor([a]), torch.randn(1, 8, 2))
    pool.copy_slot(a, b)
    torch.testing.assert_close(pool.conv[1][b], pool.conv[1][a])
    states = PositionStates.empty([0, 3, 5], num_layers=2)
    states.conv = [torch.randn(5, 12, 3), torch.randn(5, 8, 2)]
    states.ssm = [torch.randn(5, 2, 3, 5), None]
    row = states.row(request=1, num_tokens=2)
    assert row == 4
    states.write(pool, row, b)
    torch.testing.assert_close(pool.ssm[0][b], states.ssm[0][4])
    torch.testing.assert_close(pool.conv[1][b], states.conv[1][4].to(torch.bfloat16))
    with pytest.raises(AssertionError, match="ran 2 tokens"):
        states.row(request=1, num_tokens=3)
