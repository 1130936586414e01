"""The one-kernel penalties (``hinge.engine.penalty_kernel``, CUDA) under Triton's CPU interpreter:
the bits of ``sampler.apply_penalties`` on gathered table rows, for any mix of penalised and
plain rows, each penalty alone and together; and a sampler routed through it draws what the torch
path draws."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import hinge
from hinge.engine.request import Request
from hinge.engine.sampler import Sampler, apply_penalties
from hinge.sampling_params import SamplingParams

pytest.importorskip("triton")

V = 5000  # three kernel blocks, the last ragged
KERNEL = Path(hinge.__file__).parent / "engine" / "penalty_kernel.py"


@pytest.fixture
def kernel(monkeypatch):
    from hinge.testing.triton_interpreter import load_interpreted, patch_interpreter

    patch_interpreter(monkeypatch)
    return load_interpreted(KERNEL, "_interpreted_penalty_kernel")


def tables(rows=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    seen = torch.rand(rows, V, generator=gen) < 0.3
    counts = torch.randint(0, 4, (rows, V), generator=gen).float() * (torch.rand(rows, V, generator=gen) < 0.2)
    return seen, counts


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the +-3e38 entries: inf, as in torch
@pytest.mark.parametrize("which_tables", ["seen", "counts", "both"])
def test_the_kernel_gives_apply_penalties_bits_on_the_rows_it_penalises(kernel, which_tables):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, V, generator=gen) * 5
    logits[:, :7] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3.0e38, -3.0e38, 1.0])
    seen, counts = tables()
    seen = seen if which_tables != "counts" else None
    counts = counts if which_tables != "seen" else None
    batch_rows, table_rows = [0, 2, 3], torch.tensor([5, 1, 3])  # row 1 has no penalty
    rep = torch.tensor([[1.3], [0.7], [2.0]])
    freq, pres = torch.tensor([[0.4], [0.0], [-1.5]]), torch.tensor([[0.7], [0.2], [0.0]])
    which = torch.tensor([0, -1, 1, 2], dtype=torch.int32)
    got = kernel.penalise_rows(logits, seen, counts, table_rows, which, rep, freq, pres)
    want = logits.clone()
    want[batch_rows] = apply_penalties(
        logits[batch_rows], seen.index_select(0, table_rows) if seen is not None else None,
        counts.index_select(0, table_rows) if counts is not None else None, rep, freq, pres)
    assert torch.equal(got, want)
    assert not torch.equal(got[0], logits[0]) and torch.equal(got[1], logits[1])


def test_the_kernel_refuses_logits_it_cannot_read_and_names_the_torch_path(kernel):
    seen, _ = tables()
    with pytest.raises(ValueError, match="apply_penalties"):
        kernel.penalise_rows(torch.randn(2, V).half(), seen, None, torch.tensor([0]),
                             torch.tensor([0, -1], dtype=torch.int32), torch.ones(1), torch.zeros(1),
                             torch.zeros(1))


def test_a_sampler_through_the_kernel_draws_what_the_torch_path_draws(kernel, monkeypatch):
    """The sampler's table-in-place path (as on CUDA) against its gather path, one batch of
    penalised and plain, greedy and sampled rows: the same tokens and logprobs, bit for bit."""
    import sys

    from hinge.engine import sampler as sampler_module

    def requests():
        specs = [SamplingParams(temperature=0, repetition_penalty=1.4),
                 SamplingParams(temperature=0.8, top_k=40, seed=3, logprobs=True),
                 SamplingParams(temperature=0.9, top_p=0.8, repetition_penalty=1.2, frequency_penalty=0.5,
                                presence_penalty=0.3, seed=4, logprobs=True)]
        reqs = []
        for i, p in enumerate(specs):
            req = Request(f"r{i}", [7, 9, 9, 11 + i], p)
            req.output_ids = [13, 13, 40 + i]
            req.row = 3 - i
            req.sample_seed = p.seed if not p.is_greedy else None
            reqs.append(req)
        return reqs

    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(2)) * 4
    torch_path = Sampler(V, "cpu", max_rows=8)
    want = torch_path.sample(logits, torch_path.prepare(requests())).tolist()

    monkeypatch.setitem(sys.modules, "hinge.engine.penalty_kernel", kernel)
    # as on CUDA for the penalties only (the noise keeps its torch path on the CPU)
    monkeypatch.setattr(sampler_module, "fast_triton", SimpleNamespace(enabled=lambda *a, **k: True))
    fused = Sampler(V, "cpu", max_rows=8)
    args = fused.prepare(requests())
    assert args.penalty_tables is not None  # the in-place path was taken
    got = fused.sample(logits, args).tolist()
    assert got.token_ids == want.token_ids and got.logprobs == want.logprobs
    # and the draws were counted in the tables alike (``count_tokens`` against ``add``)
    assert torch.equal(fused.counts.seen, torch_path.counts.seen)
    assert torch.equal(fused.counts.counts, torch_path.counts.counts)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_kernel_gives_the_torch_kernels_bits_at_qwen3s_vocabulary():
    """Compiled: IEEE division and no FMA contraction, so the CUDA torch ops' bits."""
    from hinge.engine.penalty_kernel import penalise_rows

    vocab, gen = 151936, torch.Generator("cuda").manual_seed(0)
    logits = torch.randn(64, vocab, device="cuda", generator=gen) * 6
    seen = torch.rand(65, vocab, device="cuda", generator=gen) < 0.01
    counts = torch.randint(0, 3, (65, vocab), device="cuda", generator=gen).float() * seen
    rows = torch.arange(0, 64, 2, device="cuda")
    table_rows = torch.randperm(65, device="cuda", generator=gen)[:32]
    which = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    which[rows] = torch.arange(32, dtype=torch.int32, device="cuda")
    rep = 1 + torch.rand(32, 1, device="cuda", generator=gen)
    freq, pres = torch.rand(32, 1, device="cuda", generator=gen), torch.rand(32, 1, device="cuda", generator=gen)
    got = penalise_rows(logits, seen, counts, table_rows, which, rep, freq, pres)
    want = logits.clone()
    want[rows] = apply_penalties(logits[rows], seen[table_rows], counts[table_rows], rep, freq, pres)
    assert torch.equal(got, want)


def counted(seen, counts, table_rows, batch_rows, tokens, count):
    seen, counts = seen.clone(), counts.clone()
    count(seen, counts, table_rows, batch_rows, tokens)
    return seen, counts


def test_the_count_kernel_updates_the_tables_as_penalty_counts_add_does(kernel):
    from hinge.engine.sampler import PenaltyCounts

    def torch_add(seen, counts, table_rows, batch_rows, tokens):
        pc = PenaltyCounts.__new__(PenaltyCounts)
        pc.seen, pc.counts = seen, counts
        pc.add(table_rows, tokens.index_select(0, batch_rows))

    seen, counts = tables()
    tokens = torch.tensor([7, 4999, 7, 0, 123])
    # rows 5 and 1 twice: one request's two tokens (a verify step) count twice, the same token too
    table_rows, batch_rows = torch.tensor([5, 1, 1, 3, 5]), torch.tensor([0, 1, 2, 3, 2])
    got = counted(seen, counts, table_rows, batch_rows, tokens, kernel.count_tokens)
    want = counted(seen, counts, table_rows, batch_rows, tokens, torch_add)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(got[1], counts) and got[1][5, 7] == counts[5, 7] + 2
    with pytest.raises(ValueError, match="PenaltyCounts.add"):
        kernel.count_tokens(seen, counts.double(), table_rows, batch_rows, tokens)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_count_kernel_updates_the_tables_as_penalty_counts_add_does():
    from hinge.engine.penalty_kernel import count_tokens
    from hinge.engine.sampler import PenaltyCounts

    vocab, gen = 151936, torch.Generator("cuda").manual_seed(0)
    pc = PenaltyCounts(65, vocab, torch.device("cuda"))
    pc.seen |= torch.rand(65, vocab, device="cuda", generator=gen) < 0.01
    seen, counts = pc.seen.clone(), pc.counts.clone()
    table_rows = torch.randperm(65, device="cuda", generator=gen)[:64]
    batch_rows = torch.arange(64, device="cuda")
    tokens = torch.randint(0, vocab, (64,), device="cuda", generator=gen)
    count_tokens(seen, counts, table_rows, batch_rows, tokens)
    pc.add(table_rows, tokens)
    assert torch.equal(seen, pc.seen) and torch.equal(counts, pc.counts)
