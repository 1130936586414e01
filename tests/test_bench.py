"""``hinge bench``: prompt generation, the hinge and transformers runs, the table and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hinge.bench import (
    BenchResult,
    bench_hf,
    bench_hinge,
    file_prompts,
    format_table,
    load_hf,
    parse_len_range,
    synthetic_prompts,
)
from hinge.builtin import random_model_path
from hinge.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_model_path(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(model_dir)


class TestPrompts:
    def test_synthetic_prompts_are_seeded_mixed_length_and_free_of_special_tokens(
            self, tokenizer: Tokenizer) -> None:
        prompts = synthetic_prompts(tokenizer, 40, 16, 128, seed=3)
        assert prompts == synthetic_prompts(tokenizer, 40, 16, 128, seed=3)
        assert prompts != synthetic_prompts(tokenizer, 40, 16, 128, seed=4)
        lengths = [len(p) for p in prompts]
        assert min(lengths) >= 16 and max(lengths) <= 128 and len(set(lengths)) > 10
        special = set(tokenizer.backend.get_added_tokens_decoder())
        assert special and not special & {t for p in prompts for t in p}

    def test_prompts_file_reads_text_lines_and_jsonl(self, tmp_path: Path,
                                                     tokenizer: Tokenizer) -> None:
        (tmp_path / "p.txt").write_text("import os\n\ndef f(x):\n")
        (tmp_path / "p.jsonl").write_text('{"prompt": "import os"}\n{"prompt": "def f(x):"}\n')
        expected = [tokenizer.encode("import os"), tokenizer.encode("def f(x):")]
        assert file_prompts(str(tmp_path / "p.txt"), tokenizer) == expected
        assert file_prompts(str(tmp_path / "p.jsonl"), tokenizer) == expected

    def test_bad_prompt_sources_are_named(self, tmp_path: Path, tokenizer: Tokenizer) -> None:
        with pytest.raises(FileNotFoundError, match="nope.txt"):
            file_prompts(str(tmp_path / "nope.txt"), tokenizer)
        (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n')
        with pytest.raises(ValueError, match="'prompt'"):
            file_prompts(str(tmp_path / "bad.jsonl"), tokenizer)
        with pytest.raises(ValueError, match="MIN,MAX"):
            parse_len_range("16-128")
        with pytest.raises(ValueError, match="MIN <= MAX"):
            parse_len_range("64,16")


class TestRuns:
    def test_hinge_and_transformers_runs_produce_the_same_greedy_tokens(
            self, model_dir: Path, tokenizer: Tokenizer) -> None:
        from hinge.config import load_config
        from hinge.engine.engine import Engine

        prompts = synthetic_prompts(tokenizer, 3, 4, 12, seed=0)
        engine = Engine(load_config(env={}, overrides={"model": str(model_dir)}), progress=False)
        try:
            ours = bench_hinge(engine, prompts, output_len=6)
        finally:
            engine.close()
        hf = bench_hf(load_hf(str(model_dir), device="cpu", dtype=torch.float32), prompts, 6,
                      batch_size=1, pad_id=0)
        assert ours.output_tokens == hf.output_tokens == 18
        assert ours.input_tokens == hf.input_tokens == sum(map(len, prompts))
        assert ours.outputs == hf.outputs
        assert ours.ttft_ms is not None and ours.ttft_ms > 0 and ours.tpot_ms > 0
        assert ours.wall_s > 0 and hf.wall_s > 0
        # one prompt per batch: the third request waits for two full generates first
        assert 0 < hf.ttft_ms < 1e3 * hf.wall_s and hf.tpot_ms > 0

    def test_table_prints_every_metric_and_na_where_not_measured(self) -> None:
        a = BenchResult("hinge", 2, 10, 8, 0.5, ttft_ms=12.0, tpot_ms=3.0)
        b = BenchResult("transformers", 2, 10, 8, 2.0)
        table = format_table([a, b])
        assert "16.0" in table and "4.0" in table  # output tok/s of each
        assert "36.0" in table  # total tok/s of hinge
        ttft = next(line for line in table.splitlines() if line.startswith("mean TTFT"))
        assert ttft.split()[-2:] == ["12.0", "n/a"]


def test_bench_cli_compare_hf_prints_table_ratio_and_json(model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    run = subprocess.run(
        [sys.executable, "-m", "hinge.cli", "bench", "--model", str(model_dir), "--num-prompts", "3",
         "--input-len-range", "4,12", "--output-len", "4", "--compare-hf", "--repeat", "2",
         "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "output tok/s" in run.stdout and "hinge / transformers output throughput" in run.stdout
    assert "fastest of 2 alternating runs" in run.stdout
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert [r["name"] for r in data["results"]] == ["hinge", "transformers"]
    assert all(r["output_tokens"] == 12 for r in data["results"])
    assert data["output_throughput_ratio"] > 0
