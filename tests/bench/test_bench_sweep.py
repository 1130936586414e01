"""``hinge bench --concurrency-sweep`` and ``--plot``: the points, the order the sides run
them, the table, the PNG, and the flags that cannot work together."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from hinge.bench import (
    BenchResult,
    Point,
    RequestRecord,
    format_sweep_table,
    parse_concurrencies,
    run_points,
    sweep_points,
    sweep_rows,
)
from hinge.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _result(name: str, n: int, wall: float, ttft: float, latency: float,
            output_len: int = 5) -> BenchResult:
    records = [RequestRecord(input_len=4, output_len=output_len, ttft_s=ttft, latency_s=latency)
               for _ in range(n)]
    return BenchResult(name, records, wall)


class FakeSide:
    """Records open/run/close in a shared log; a run's wall time is its place in the log."""

    def __init__(self, name: str, log: list[str], fail_at: int | None = None) -> None:
        self.name, self.log, self.fail_at = name, log, fail_at

    def open(self) -> None:
        self.log.append(f"open {self.name}")

    def run(self, point: Point, output_len: int, progress: object = None) -> BenchResult:
        self.log.append(f"run {self.name} C={point.concurrency}")
        if self.fail_at is not None and len(self.log) >= self.fail_at:
            raise RuntimeError("boom")
        return _result(self.name, len(point.prompts), float(len(self.log)), 0.01, 0.05)

    def close(self) -> None:
        self.log.append(f"close {self.name}")


class TestPoints:
    def test_concurrencies_parse_sorted_and_distinct_and_bad_ones_name_the_flag(self) -> None:
        assert parse_concurrencies("64,1,8,8") == [1, 8, 64]
        with pytest.raises(ValueError, match="--concurrency-sweep must be integers"):
            parse_concurrencies("1,eight")
        with pytest.raises(ValueError, match="--concurrency-sweep needs concurrencies >= 1"):
            parse_concurrencies("0,4")

    def test_each_point_sends_rounds_times_its_concurrency_and_cycles_the_prompts(self) -> None:
        prompts = [[1], [2], [3]]
        points = sweep_points(prompts, [1, 2, 4], rounds=2)
        assert [len(p.prompts) for p in points] == [2, 4, 8]
        assert [(p.concurrency, p.hf_batch_size) for p in points] == [(1, 1), (2, 2), (4, 4)]
        assert points[2].prompts == [[1], [2], [3], [1], [2], [3], [1], [2]]
        assert all(p.arrivals is None for p in points)  # all at once

    def test_on_a_gpu_each_side_runs_every_point_before_the_next_side_is_built(self) -> None:
        log: list[str] = []
        sides = [FakeSide("hinge", log), FakeSide("transformers", log)]
        points = sweep_points([[1]], [1, 2], rounds=1)
        results = run_points(sides, points, output_len=3, repeat=2, sequential=True)
        assert log == ["open hinge", "run hinge C=1", "run hinge C=1", "run hinge C=2",
                       "run hinge C=2", "close hinge", "open transformers",
                       "run transformers C=1", "run transformers C=1", "run transformers C=2",
                       "run transformers C=2", "close transformers"]
        assert [len(r["hinge"]) for r in results] == [2, 2]
        assert [r["transformers"][0].wall_s for r in results] == [8.0, 10.0]

    def test_on_the_cpu_the_sides_alternate_run_by_run(self) -> None:
        log: list[str] = []
        sides = [FakeSide("hinge", log), FakeSide("transformers", log)]
        run_points(sides, sweep_points([[1]], [1], rounds=1), output_len=3, repeat=2,
                   sequential=False)
        assert log == ["open hinge", "open transformers", "run hinge C=1",
                       "run transformers C=1", "run hinge C=1", "run transformers C=1",
                       "close hinge", "close transformers"]

    @pytest.mark.parametrize("sequential", [True, False])
    def test_a_failing_run_still_closes_every_opened_side(self, sequential: bool) -> None:
        log: list[str] = []
        sides = [FakeSide("hinge", log, fail_at=2), FakeSide("transformers", log)]
        with pytest.raises(RuntimeError, match="boom"):
            run_points(sides, sweep_points([[1]], [1], rounds=1), output_len=3, repeat=1,
                       sequential=sequential)
        assert "close hinge" in log
        assert ("close transformers" in log) == ("open transformers" in log)


def test_sweep_table_has_a_row_per_concurrency_and_side_and_the_ratios() -> None:
    # 2 requests x 5 tokens in 0.5 s = 20 tok/s; TTFT 10 ms; TPOT (50 - 10) / 4 = 10 ms
    results = [{"hinge": _result("hinge", 1, 0.25, 0.010, 0.050),
                "transformers": _result("transformers", 1, 1.0, 0.020, 0.100)},
               {"hinge": _result("hinge", 2, 0.5, 0.010, 0.050),
                "transformers": _result("transformers", 2, 0.25, 0.020, 0.060)}]
    table = format_sweep_table(sweep_rows([1, 2], results))
    lines = table.splitlines()
    assert lines[0].split() == ["concurrency", "side", "requests", "out", "tok/s", "TTFT",
                                "p50", "TTFT", "p90", "TTFT", "p99", "TPOT", "p50", "TPOT",
                                "p90", "TPOT", "p99"]
    rows = [re.split(r"\s+", line.strip()) for line in lines[2:6]]
    assert rows[0] == ["1", "hinge", "1/1", "20.0"] + ["10.00"] * 6
    assert rows[1] == ["1", "transformers", "1/1", "5.0"] + ["20.00"] * 3 + ["20.00"] * 3
    assert rows[2] == ["2", "hinge", "2/2", "20.0"] + ["10.00"] * 6
    assert rows[3] == ["2", "transformers", "2/2", "40.0"] + ["20.00"] * 3 + ["10.00"] * 3
    assert "hinge / transformers output throughput at concurrency 1: 4.00x" in table
    assert "hinge / transformers output throughput at concurrency 2: 0.50x" in table


def test_sweep_with_compare_hf_and_plot_end_to_end_on_the_cpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "plots" / "bench.png"
    status = main(["bench", "--random-weights", "--arch", "qwen3_5", "--size", "tiny",
                   "--concurrency-sweep", "1,3", "--sweep-rounds", "2", "--input-len-range",
                   "4,8", "--output-len", "3", "--compare-hf", "--plot", str(png),
                   "--max-running-requests", "2", "--device", "cpu", "--disable-tqdm",
                   "--json", "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert png.read_bytes()[:8] == PNG_MAGIC and f"plot: {png}" in out.err
    data = json.loads(out.out)
    assert [p["concurrency"] for p in data["sweep"]] == [1, 3]
    for point, count in zip(data["sweep"], (2, 6), strict=True):
        assert [r["name"] for r in point["results"]] == ["hinge", "transformers"]
        assert all(r["completed"] == count and r["output_tokens"] == 3 * count
                   for r in point["results"])
        ours, theirs = point["results"]
        assert point["output_throughput_ratio"] == pytest.approx(
            ours["output_tok_s"] / theirs["output_tok_s"])
    # concurrency 3 needs 3 running requests: the engine's cap of 2 was raised, and said so
    assert data["settings"]["max_running_requests"] == 3
    assert "max_running_requests raised to 3 for concurrency 3" in out.err
    table_rows = [line.split() for line in out.err.splitlines()
                  if re.match(r"\s+[13]\s+(hinge|transformers)\s", line)]
    assert [row[:3] for row in table_rows] == [["1", "hinge", "2/2"], ["1", "transformers", "2/2"],
                                               ["3", "hinge", "6/6"], ["3", "transformers", "6/6"]]


@pytest.mark.parametrize(("argv", "message"), [
    (["--plot", "x.png"], "--plot draws a --concurrency-sweep"),
    (["--concurrency-sweep", "1,2", "--plot", "x.svg"], "ending in .png"),
    (["--concurrency-sweep", "1,2", "--max-concurrency", "4"], "leave out --request-rate and "
     "--max-concurrency"),
    (["--concurrency-sweep", "1,2", "--url", "http://127.0.0.1:1"], "cannot be combined with "
     "--url"),
    (["--concurrency-sweep", "0"], "concurrencies >= 1"),
    (["--concurrency-sweep", "1", "--sweep-rounds", "0"], "--sweep-rounds must be >= 1"),
    (["--arch", "qwen3"], "add --random-weights"),
    (["--random-weights", "--size", "70b"], "not a qwen3 preset; choose one of tiny"),
    (["--random-weights", "--url", "http://127.0.0.1:1"], "cannot be combined with --url"),
    (["--random-weights", "--prompts-file", "p.txt"], "cannot be combined with --prompts-file"),
    (["--model-config", "c.json", "--arch", "llama"], "leave out --arch/--size"),
])
def test_impossible_sweep_and_random_weight_flags_are_one_error_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hinge: error:") and message in err[0], err


def test_random_weights_with_a_model_directory_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--device", "cpu", "--random-weights", "--model", str(tmp_path)]) == 2
    assert "cannot be combined with --model" in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_bench_extra(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["bench", "--device", "cpu", "--concurrency-sweep", "1", "--plot",
                 "x.png"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hinge: error: --plot needs matplotlib") and "hinge-llm[bench]" in line
