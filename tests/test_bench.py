"""``hinge bench``: prompt generation, the hinge and transformers runs, the table and the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hinge.bench import (
    BenchResult,
    RequestRecord,
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
        for result in (ours, hf):  # every request measured, whatever the clock said
            assert result.completed == 3 and result.failed == 0
            assert all(r.ttft_s is not None and r.tpot_s is not None for r in result.records)
            summary = result.to_dict()
            assert all(summary[k][s] is not None for k in ("ttft_ms", "tpot_ms", "e2e_ms")
                       for s in ("mean", "p50", "p90", "p99"))

    def test_table_prints_every_metric_and_na_where_not_measured(self) -> None:
        done = [RequestRecord(input_len=5, output_len=4, ttft_s=0.012, latency_s=0.021)] * 2
        a = BenchResult("hinge", done, 0.5)
        b = BenchResult("transformers", [RequestRecord(input_len=5, output_len=4)] * 2, 2.0)
        table = format_table([a, b])
        cells = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()[1:]]
        rows = {label: values for label, *values in cells}
        assert rows["output tok/s"] == ["16.0", "4.0"]
        assert rows["total tok/s"] == ["36.0", "9.0"]
        assert rows["p90 TTFT (ms)"] == ["12.00", "n/a"]
        assert rows["mean TPOT (ms)"] == ["3.00", "n/a"]  # (21 - 12) ms over 3 tokens
        assert rows["request rate asked (req/s)"] == ["inf", "inf"]
        assert rows["request rate achieved (req/s)"] == ["n/a", "n/a"]  # all sent at 0


def test_bench_cli_compare_hf_prints_json_alone_on_stdout(model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    run = subprocess.run(
        [sys.executable, "-m", "hinge.cli", "bench", "--model", str(model_dir), "--num-prompts", "3",
         "--input-len-range", "4,12", "--output-len", "4", "--compare-hf", "--repeat", "2",
         "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)  # the whole of stdout is one JSON document
    assert "output tok/s" in run.stderr and "hinge / transformers output throughput" in run.stderr
    assert "fastest of 2 runs" in run.stderr
    threads = data["settings"]["torch_threads"]
    assert f"{threads} torch threads on both sides" in run.stderr
    assert [r["name"] for r in data["results"]] == ["hinge", "transformers"]
    assert [r["torch_threads"] for r in data["results"]] == [threads, threads]
    assert all(r["output_tokens"] == 12 and r["completed"] == 3 for r in data["results"])
    assert data["identical_outputs"] == 3 and "output_throughput_ratio" in data


def test_bench_compare_hf_without_model_compares_the_embedded_default_model() -> None:
    """No --model: both sides read the embedded model's directory (transformers once got the
    path 'None' and tried the hub)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = subprocess.run(
        [sys.executable, "-m", "hinge.cli", "bench", "--num-prompts", "2", "--input-len-range",
         "4,8", "--output-len", "3", "--compare-hf", "--json", "--disable-tqdm"],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(run.stdout)
    assert [r["name"] for r in data["results"]] == ["hinge", "transformers"]
    assert all(r["output_tokens"] == 6 for r in data["results"])
