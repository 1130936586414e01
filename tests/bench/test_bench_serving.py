"""``hinge bench --url`` against a real ``hinge serve`` subprocess (tiny random model, started by
this module on 127.0.0.1 at a free port): both APIs, token counts, outputs, failures."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_helpers import API_KEY, MAX_MODEL_LEN, ServerProcess, free_port  # noqa: E402

from hinge.bench import ServerTarget, bench_server, poisson_arrivals, synthetic_prompts  # noqa: E402
from hinge.engine.tokenizer import Tokenizer  # noqa: E402

NUM, LO, HI, OUT = 5, 4, 12, 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hinge.builtin import random_model_path

    return random_model_path(tmp_path_factory.mktemp("bench-model"))


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    proc = ServerProcess(model_dir, tmp_path_factory.mktemp("bench-server-logs"))
    yield proc
    assert proc.stop() == 0, proc.log()[-3000:]


@pytest.fixture(scope="module")
def prompts(model_dir: Path) -> list[list[int]]:
    """The prompts ``hinge bench`` builds for NUM, LO..HI and seed 0: the oracle for counts."""
    return synthetic_prompts(Tokenizer.from_pretrained(model_dir), NUM, LO, HI, seed=0)


def bench_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    return subprocess.run([sys.executable, "-m", "hinge.cli", "bench", *args, "--num-prompts",
                           str(NUM), "--input-len-range", f"{LO},{HI}", "--disable-tqdm",
                           "--json"], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("backend", ["native", "openai"])
def test_url_bench_counts_exactly_the_tokens_asked_for_on_both_apis(
        server: ServerProcess, prompts: list[list[int]], backend: str) -> None:
    run = bench_cli("--url", server.base_url, "--backend", backend, "--api-key", API_KEY,
                    "--output-len", str(OUT), "--request-rate", "50", "--max-concurrency", "2")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    (result,) = data["results"]
    assert result["name"] == f"server:{backend}"
    assert (result["completed"], result["failed"]) == (NUM, 0)
    assert result["input_tokens"] == sum(map(len, prompts))  # ids sent as ids: exact lengths
    assert result["output_tokens"] == NUM * OUT
    assert all(result[k]["p99"] is not None for k in ("ttft_ms", "tpot_ms", "e2e_ms"))
    assert data["settings"]["backend"] == backend and data["settings"]["request_rate"] == 50
    assert "requests completed" in run.stderr  # the table, on stderr


def test_native_stream_outputs_equal_the_offline_engine_greedy_tokens(
        server: ServerProcess, model_dir: Path, prompts: list[list[int]]) -> None:
    from hinge import LLM, SamplingParams

    target = ServerTarget(server.base_url, backend="native", api_key=API_KEY)
    result = asyncio.run(bench_server(target, prompts, OUT, arrivals=poisson_arrivals(NUM, 20, 0)))
    assert [r.output_len for r in result.records] == [OUT] * NUM
    assert [r.input_len for r in result.records] == [len(p) for p in prompts]
    with LLM(str(model_dir), deterministic=True, kv_cache_bytes=32 * 2**20,
             max_model_len=MAX_MODEL_LEN) as llm:
        want = llm.generate(prompts, SamplingParams(max_new_tokens=OUT, temperature=0,
                                                    ignore_eos=True))
    assert result.outputs == [w.token_ids for w in want]


def test_requests_the_server_refuses_are_counted_as_failed_and_exit_1(
        server: ServerProcess) -> None:
    run = bench_cli("--url", server.base_url, "--api-key", API_KEY, "--output-len",
                    str(MAX_MODEL_LEN))  # prompt + output exceeds the server's context
    assert run.returncode == 1, run.stderr
    (result,) = json.loads(run.stdout)["results"]
    assert (result["completed"], result["failed"], result["output_tokens"]) == (0, NUM, 0)
    assert result["errors"] and all("HTTP 400" in e for e in result["errors"])


def test_no_server_at_the_url_is_one_error_line_and_exit_2() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = bench_cli("--url", url)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        next(line for line in run.stderr.splitlines() if line.startswith("hinge: error:"))]
    assert f"cannot reach a server at {url}" in run.stderr and "hinge serve" in run.stderr


def test_a_missing_api_key_is_named(server: ServerProcess) -> None:
    run = bench_cli("--url", server.base_url)
    assert run.returncode == 2 and "--api-key" in run.stderr
