"""The ``--concurrency-sweep`` report: one table row per concurrency and side, and its JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hinge.bench.result import BenchResult
from hinge.bench.stats import latency_summaries

SWEEP_NOTE = ("TTFT and TPOT in ms. At concurrency C: hinge keeps C requests in flight "
              "(continuous batching)")
HF_NOTE = ("; transformers runs model.generate on batches of C (greedy, KV cache, left padding), "
           "its TTFT from a separate 1-token generate of each batch")
_COLUMNS = ("concurrency", "side", "requests", "out tok/s", "TTFT p50", "TTFT p90", "TTFT p99",
            "TPOT p50", "TPOT p90", "TPOT p99")


@dataclass
class SweepRow:
    """One side's (fastest) run at one concurrency."""

    concurrency: int
    result: BenchResult
    latency: dict[str, dict[str, float | None]] = field(init=False)

    def __post_init__(self) -> None:
        self.latency = latency_summaries(self.result.records)


def sweep_rows(concurrencies: list[int], results: list[dict[str, BenchResult]]) -> list[SweepRow]:
    """Rows in concurrency order, the sides of each concurrency in their order."""
    return [SweepRow(c, r) for c, sides in zip(concurrencies, results, strict=True)
            for r in sides.values()]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def format_sweep_table(rows: list[SweepRow]) -> str:
    """A row each: concurrency, side, completed/sent requests, output tok/s and the p50/p90/p99
    TTFT and TPOT in ms; then the hinge/transformers throughput ratio per concurrency."""
    cells = [list(_COLUMNS)]
    for row in rows:
        r, lat = row.result, row.latency
        cells.append([str(row.concurrency), r.name, f"{r.completed}/{r.num_requests}",
                      f"{r.output_tok_s:.1f}",
                      *(_ms(lat["ttft_ms"][q]) for q in ("p50", "p90", "p99")),
                      *(_ms(lat["tpot_ms"][q]) for q in ("p50", "p90", "p99"))])
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i != 1 else c.ljust(w) for i, (c, w) in
                       enumerate(zip(line, widths, strict=True))) for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    hf = any(row.result.name == "transformers" for row in rows)
    lines.append(SWEEP_NOTE + (HF_NOTE if hf else "") + ".")
    for c, ratio in throughput_ratios(rows).items():
        lines.append(f"hinge / transformers output throughput at concurrency {c}: {ratio:.2f}x")
    lines += [f"{row.result.name} error at concurrency {row.concurrency}: {e}"
              for row in rows for e in row.result.errors()]
    return "\n".join(lines)


def throughput_ratios(rows: list[SweepRow]) -> dict[int, float]:
    """hinge's output tok/s over transformers' at each concurrency both ran."""
    by = {(row.concurrency, row.result.name): row.result for row in rows}
    return {c: by[c, "hinge"].output_tok_s / by[c, "transformers"].output_tok_s
            for c, name in by if name == "hinge" and (c, "transformers") in by
            and by[c, "transformers"].output_tok_s > 0}


def sweep_json(rows: list[SweepRow]) -> list[dict[str, Any]]:
    """``[{"concurrency", "results": [...], "output_throughput_ratio"?}]`` in order."""
    ratios = throughput_ratios(rows)
    out: list[dict[str, Any]] = []
    for row in rows:
        if not out or out[-1]["concurrency"] != row.concurrency:
            out.append({"concurrency": row.concurrency, "results": []})
            if row.concurrency in ratios:
                out[-1]["output_throughput_ratio"] = ratios[row.concurrency]
        out[-1]["results"].append(row.result.to_dict())
    return out
