"""The top-k path on CUDA at Qwen3's vocabulary (run on the GPU machine: ``pytest -m gpu
tests/engine``): ``torch.topk`` candidates draw the token the full sort draws, and the batched
(non-deterministic) filters and race give a row the same token alone and in a batch, since their
only reductions are exact."""

from __future__ import annotations

import pytest
import torch

from hinge.engine.sampler import TIE_MARGIN, kept_weights, sample_rows

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

VOCAB = 151936
ROWS = 64


def _inputs(seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(ROWS, VOCAB, generator=g, device="cuda") * 4).bfloat16().float()
    x[::4] = torch.round(x[::4] * 2) / 2  # long runs of equal values
    pick = lambda xs: torch.tensor(xs, device="cuda")[  # noqa: E731
        torch.randint(len(xs), (ROWS,), generator=g, device="cuda")]
    return x, (pick([0.3, 0.7, 1.0, 1.3]).unsqueeze(1), pick([1, 5, 50, 200, 1024]),
               pick([1.0, 0.95, 0.9, 0.5]), pick([0.0, 0.0, 0.05, 0.2]))


@pytest.mark.parametrize("seed", range(3))
def test_the_topk_path_draws_the_full_sorts_token_on_cuda(seed):
    x, filters = _inputs(seed)
    candidates = int(filters[1].max()) + TIE_MARGIN
    for step in range(8):
        keys = (torch.arange(ROWS, device="cuda") * 31 + seed, torch.full((ROWS,), step, device="cuda"))
        full = sample_rows(x, None, *filters, *keys)
        fast = sample_rows(x, candidates, *filters, *keys)
        assert torch.equal(fast, full), (step, (fast != full).nonzero().flatten().tolist())


def test_the_kept_weights_have_the_same_bits_alone_and_in_batches_on_cuda():
    x, (temperature, top_k, top_p, min_p) = _inputs(7)
    vals, _ = (x / temperature).topk(1024 + TIE_MARGIN, dim=-1)
    full = kept_weights(vals, top_k, top_p, min_p)
    for n in (1, 2, 17, 64):
        assert torch.equal(kept_weights(vals[:n], top_k[:n], top_p[:n], min_p[:n]), full[:n]), n
    for i in (0, 33):
        one = slice(i, i + 1)
        assert torch.equal(kept_weights(vals[one], top_k[one], top_p[one], min_p[one])[0], full[i])


def test_a_row_draws_the_same_token_alone_and_in_a_batch_on_cuda():
    x, filters = _inputs(8)
    keys = (torch.arange(ROWS, device="cuda") + 5, torch.arange(ROWS, device="cuda") % 3)
    for candidates in (None, 1024 + TIE_MARGIN):
        batch = sample_rows(x, candidates, *filters, *keys)
        for i in (0, 17, 63):
            one = slice(i, i + 1)
            alone = sample_rows(x[one], candidates, *(f[one] for f in filters),
                                *(k[one] for k in keys))
            assert alone.item() == batch[i].item(), (candidates, i)


def test_the_cuda_noise_kernel_gives_the_cpu_noise_bit_for_bit_at_qwen3s_vocabulary():
    from hinge.engine.draw import row_keys, uniform_noise

    keys = row_keys(torch.arange(ROWS) * 7919 + 2**33, torch.arange(ROWS) % 5)
    ids = torch.randint(VOCAB, (ROWS, 114), generator=torch.Generator().manual_seed(9))
    for token_ids in (VOCAB, ids):
        cpu = uniform_noise(keys, token_ids)
        cuda = uniform_noise(keys.cuda(), token_ids if isinstance(token_ids, int) else token_ids.cuda())
        assert torch.equal(cuda.cpu(), cpu)
