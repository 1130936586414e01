"""``hinge bench`` on the command line: JSON alone on stdout, --help defaults, flag errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hinge.bench import poisson_arrivals, synthetic_prompts
from hinge.cli import main
from hinge.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hinge.builtin import random_model_path

    return random_model_path(tmp_path_factory.mktemp("bench-cli-model"))


def test_json_is_the_whole_of_stdout_with_percentiles_and_the_rates(model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    run = subprocess.run(
        [sys.executable, "-m", "hinge.cli", "bench", "--model", str(model_dir), "--num-prompts",
         "4", "--input-len-range", "4,12", "--output-len", "5", "--request-rate", "40",
         "--seed", "3", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)  # fails if anything but one JSON document is on stdout
    (result,) = data["results"]
    prompts = synthetic_prompts(Tokenizer.from_pretrained(model_dir), 4, 4, 12, seed=3)
    assert (result["completed"], result["failed"]) == (4, 0)
    assert result["input_tokens"] == sum(map(len, prompts))
    assert result["output_tokens"] == 4 * 5
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(result[key]) == {"mean", "p50", "p90", "p99"}
        assert all(value is not None for value in result[key].values())
    # with no cap, requests are sent at their scheduled (seeded) times: the achieved rate is
    # that of the schedule itself
    arrivals = poisson_arrivals(4, 40.0, seed=3)
    assert result["achieved_request_rate"] == pytest.approx(3 / arrivals[-1])
    assert result["request_rate"] == 40.0 and data["settings"]["request_rate"] == 40.0
    assert result["torch_threads"] == data["settings"]["torch_threads"]
    assert "p99 TTFT (ms)" in run.stderr and "hinge 1/1" in run.stderr  # table and progress bar


def test_help_shows_the_defaults_and_which_repeat_run_is_reported(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for default in ("number of requests (default: 32)", "(default: 16,128)",
                    "output tokens per request (default: 64)", "all at once (default: inf)",
                    "(default: no cap)", "(default: native)", "(default: 1)"):
        assert default in text
    assert "report each side's fastest run, the one with the shortest wall time" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--compare-hf", "--url", "http://127.0.0.1:1"], "cannot be combined with --url"),
    (["--compare-hf", "--request-rate", "4"], "leave out --request-rate (or drop --compare-hf)"),
    (["--request-rate", "0"], "--request-rate must be > 0"),
    (["--max-concurrency", "0"], "--max-concurrency must be >= 1"),
    (["--output-len", "0"], "--output-len must be >= 1"),
])
def test_impossible_flags_are_one_error_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hinge: error:") and message in err[0]


def test_compare_hf_at_a_concurrency_runs_transformers_in_batches_of_that_size(
        model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", "--model", str(model_dir), "--num-prompts", "4",
                   "--input-len-range", "4,10", "--output-len", "3", "--max-concurrency", "2",
                   "--compare-hf", "--device", "cpu", "--disable-tqdm", "--json",
                   "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    data = json.loads(out.out)
    assert "transformers: batched model.generate (greedy, KV cache, 2 prompts per call" in out.err
    assert [r["completed"] for r in data["results"]] == [4, 4]
    assert data["identical_outputs"] == 4  # real weights: the greedy outputs are compared
    assert "identical greedy outputs: 4/4" in out.err
