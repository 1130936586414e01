"""The per-request seeded draw (``hinge.engine.draw``): tokens come with their probabilities, a
request's draw does not depend on the batch around it, and the noise is the documented hash."""

from __future__ import annotations

import math

import torch

from hinge.engine.draw import draw, row_keys, uniform_noise


def _mix_py(x: int) -> int:
    """The 32-bit finaliser restated in plain Python integers."""
    m = 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x045D9F3B) & m
    x ^= x >> 16
    x = (x * 0x045D9F3B) & m
    return x ^ (x >> 16)


def test_the_noise_is_the_documented_hash_of_seed_step_and_token_id():
    seeds, steps = [12345678901234, 7, 2**62 + 5], [0, 3, 1000]
    u = uniform_noise(row_keys(torch.tensor(seeds), torch.tensor(steps)), 50)
    for r, (seed, step) in enumerate(zip(seeds, steps, strict=True)):
        key = _mix_py(_mix_py((seed & 0xFFFFFFFF) ^ _mix_py(seed >> 32)) ^ step)
        for v in (0, 1, 17, 49):
            h = _mix_py(key ^ ((v * 0x9E3779B1) & 0xFFFFFFFF))
            assert u[r, v].item() == ((h >> 9) + 0.5) / 2**23


def test_draws_follow_the_distribution_and_never_pick_a_zero():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])
    n = 20000
    tokens = draw(probs.expand(n, -1), torch.full((n,), 99), torch.arange(n))
    freq = torch.bincount(tokens, minlength=5).double() / n
    assert freq[4] == 0
    for p, f in zip(probs[0].tolist(), freq.tolist(), strict=True):
        assert abs(f - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12, (p, f)


def test_a_requests_draw_is_the_same_alone_and_in_any_batch():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(6, 1000, generator=g), dim=-1)
    seeds, steps = torch.tensor([5, 6, 7, 8, 9, 10]), torch.tensor([0, 4, 4, 9, 1, 2])
    together = draw(probs, seeds, steps)
    for r in range(6):
        alone = draw(probs[r:r + 1], seeds[r:r + 1], steps[r:r + 1])
        assert alone.item() == together[r].item()
    flipped = draw(probs.flip(0), seeds.flip(0), steps.flip(0))
    assert torch.equal(flipped.flip(0), together)


def test_seeds_and_positions_change_the_draw():
    probs = torch.full((1, 4096), 1 / 4096)
    by_step = {draw(probs, torch.tensor([1]), torch.tensor([s])).item() for s in range(20)}
    by_seed = {draw(probs, torch.tensor([s]), torch.tensor([0])).item() for s in range(20)}
    assert len(by_step) >= 18 and len(by_seed) >= 18


def test_the_noise_of_given_token_ids_is_their_column_of_the_whole_vocabulary():
    keys = row_keys(torch.tensor([3, 2**40 + 1]), torch.tensor([5, 0]))
    whole = uniform_noise(keys, 5000)
    ids = torch.randint(5000, (2, 64), generator=torch.Generator().manual_seed(1))
    assert torch.equal(uniform_noise(keys, ids), whole.gather(1, ids))
    assert torch.equal(uniform_noise(keys, ids[0]), whole[:, ids[0]])


def test_a_race_over_shuffled_candidates_picks_the_token_of_the_race_over_the_vocabulary():
    g = torch.Generator().manual_seed(2)
    weights = torch.rand(8, 3000, generator=g) * (torch.rand(8, 3000, generator=g) < 0.02)
    seeds, steps = torch.arange(8) + 100, torch.arange(8)
    whole = draw(weights, seeds, steps)
    top = weights.argsort(dim=-1, descending=True)[:, :80]  # every non-zero weight and more
    keep = torch.stack([r[torch.randperm(80, generator=g)] for r in top])  # in shuffled order
    assert (weights.gather(1, keep) > 0).sum() == (weights > 0).sum()
    assert torch.equal(draw(weights.gather(1, keep), seeds, steps, keep), whole)


def test_a_tied_race_goes_to_the_smallest_token_id_in_any_column_order():
    weights = torch.zeros(1, 10)
    weights[0, [3, 7]] = 1.0
    ids = torch.tensor([[7, 3]])
    noise = uniform_noise(row_keys(torch.tensor([0]), torch.tensor([0])), ids)
    tied = torch.ones(1, 2) * noise.log().neg()  # weight / exp equal for both ids
    assert draw(tied, torch.tensor([0]), torch.tensor([0]), ids).item() == 3
    assert draw(tied.flip(1), torch.tensor([0]), torch.tensor([0]), ids.flip(1)).item() == 3


def test_the_host_row_keys_are_the_device_row_keys():
    from hinge.engine.draw import row_keys_host

    seeds, steps = [0, 1, 12345678901234, 2**62 + 5, 2**63 - 1], [0, 3, 1000, 2**31, 7]
    assert row_keys_host(seeds, steps) == row_keys(torch.tensor(seeds), torch.tensor(steps)).tolist()


def test_a_draw_keyed_by_host_keys_is_the_draw_keyed_by_seeds_and_steps():
    from hinge.engine.draw import row_keys_host

    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(5, 700, generator=g), dim=-1)
    seeds, steps = [5, 2**40 + 3, 7, 8, 9], [0, 4, 4, 9, 1]
    keys = torch.tensor(row_keys_host(seeds, steps))
    assert torch.equal(draw(probs, None, None, keys=keys),
                       draw(probs, torch.tensor(seeds), torch.tensor(steps)))


def test_the_triton_hash_gives_the_torch_noise_bit_for_bit_under_the_interpreter(monkeypatch):
    """The one-kernel CUDA noise (``draw_kernel``) is the torch formula's bits, for an int V, one
    id list for every row, and a (B, N) list (a non-contiguous view, as top-k indices can be)."""
    import pytest

    pytest.importorskip("triton")
    from pathlib import Path

    import hinge
    from hinge.testing.triton_interpreter import load_interpreted, patch_interpreter

    patch_interpreter(monkeypatch)
    kernel = load_interpreted(Path(hinge.__file__).parent / "engine" / "draw_kernel.py",
                              "_interpreted_draw_kernel")
    keys = row_keys(torch.tensor([3, 2**40 + 1, 0]), torch.tensor([5, 0, 2**20]))
    ids = torch.randint(151936, (3, 300), generator=torch.Generator().manual_seed(4))
    for token_ids in (1500, ids[0], ids[:, ::2]):
        want = uniform_noise(keys, token_ids)
        got = kernel.hash_uniform(keys, token_ids)
        assert got.dtype == torch.float32 and torch.equal(got, want)
    assert kernel.hash_uniform(keys[:0], 10).shape == (0, 10)
