"""``hinge bench`` with random weights on CUDA: bf16 on both sides, the sides one after the other
on the card, the real Qwen3 vocabulary (151,936 ids, beyond the embedded tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hinge.cli import main


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe", "qwen3_5", "llama"])
def test_tiny_presets_sweep_with_compare_hf_and_plot_on_cuda(
        arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "bench.png"
    status = main(["bench", "--device", "cuda", "--random-weights", "--arch", arch, "--size",
                   "tiny", "--concurrency-sweep", "1,4", "--output-len", "8",
                   "--input-len-range", "8,32", "--compare-hf", "--plot", str(png),
                   "--disable-tqdm", "--json", "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    data = json.loads(out.out)
    assert data["settings"]["device"] == "cuda" and data["settings"]["dtype"] == "bfloat16"
    for point in data["sweep"]:
        assert [r["completed"] for r in point["results"]] == [point["concurrency"]] * 2
        assert point["output_throughput_ratio"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_qwen3_0_6b_builds_its_real_vocabulary_on_cuda_and_samples_ids_beyond_the_tokenizer(
        capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", "--device", "cuda", "--random-weights", "--arch", "qwen3", "--size",
                   "0.6b", "--num-prompts", "8", "--input-len-range", "64,128",
                   "--output-len", "16", "--compare-hf", "--disable-tqdm", "--json",
                   "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    data = json.loads(out.out)
    assert data["settings"]["parameters"] == 596049920  # Qwen3-0.6B, tied embeddings
    assert [r["output_tokens"] for r in data["results"]] == [8 * 16, 8 * 16]
    assert data["identical_outputs"] is None
