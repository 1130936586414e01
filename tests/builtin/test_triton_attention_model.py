"""Deterministic mode with the ``triton`` backend, end to end on a tiny Qwen3: a request's
logprobs are the same bits alone and in a batch, and a decode row equals the prefill row of the
same position (a prefix-cache hit or a cold rescore give the same bits)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from triton_cases import make_backend, needs_cuda  # noqa: E402

from hinge.builtin.no_quant import NoQuantizer  # noqa: E402
from hinge.layers.batch_invariant import log_softmax  # noqa: E402
from hinge.models.loader import load_model  # noqa: E402
from hinge.plugins.specs import BuildContext  # noqa: E402
from hinge.testing.checkpoints import make_tiny_checkpoint  # noqa: E402
from hinge.testing.paged_steps import PagedSteps  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("qwen3"), max_position_embeddings=4096)


def prompt(seed: int, n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def logprob_rows(checkpoint, device: str, dtype: torch.dtype, n: int, **options) -> dict:
    """Logprobs of every position of one request of ``n`` tokens, three ways."""
    build = BuildContext(device=device, dtype=dtype, deterministic=True, page_size=16)
    model = load_model(checkpoint, device=device, dtype=dtype, quantizer=NoQuantizer(None, build),
                       deterministic=True, progress=False)
    target = prompt(1, n)

    def steps(schedule):
        paged = PagedSteps(model, make_backend(device, dtype, **options), page_size=16,
                           num_pages=4 + 4 * (-(-n // 16)), device=device)
        rows = []
        for step in schedule:
            out = paged.step(step)
            rows.append(paged.split(out, step)[[rid for rid, _ in step].index("t")])
        return log_softmax(torch.cat(rows).float()).cpu()

    cut = n - 3
    return {
        "alone": steps([[("t", target)]]),
        "batched": steps([[("a", prompt(2, 37)), ("t", target), ("b", prompt(3, 5))]]),
        # a prefix in a batch, then three decode steps beside another request's decodes
        "decoded": steps([[("a", prompt(2, 90)), ("t", target[:cut])]]
                         + [[("a", [9]), ("t", [tok])] for tok in target[cut:]]),
    }


def check(rows: dict) -> None:
    assert torch.isfinite(rows["alone"]).all()
    assert torch.equal(rows["alone"], rows["batched"]), "logprobs changed when batched"
    assert torch.equal(rows["alone"], rows["decoded"]), (
        "a decode row's logprobs differ from the prefill row of the same position")


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_logprobs_equal_alone_batched_and_prefill_row_vs_decode_row(checkpoint, monkeypatch,
                                                                    one_thread):
    """CPU, kernels interpreted; 64-key splits so the 150 positions span three."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check(logprob_rows(checkpoint, "cpu", torch.float32, 150, split_size=64))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_logprobs_equal_alone_batched_and_prefill_row_vs_decode_row(checkpoint, dtype):
    """CUDA, default 256-key splits, 1100 positions (five splits)."""
    check(logprob_rows(checkpoint, "cuda", dtype, 1100))
