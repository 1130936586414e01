"""Prometheus text exposition (format 0.0.4), written by hand: counters, gauges, histograms.

Every series is named ``hinge:<name>``. Observations come from the engine thread and renders from
the event loop, so each metric guards its values with one lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable

LabelKey = tuple[tuple[str, str], ...]

#: seconds; TTFT on a CPU spans milliseconds to tens of seconds.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: seconds between output tokens (inter-token latency, time per output token)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: seconds a whole request takes, or waits in the queue
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                   300.0, 600.0)


def _key(labels: dict[str, str] | None) -> LabelKey:
    return tuple(sorted((labels or {}).items()))


def _fmt_labels(key: LabelKey, extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = key + extra
    if not pairs:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = "hinge:" + name
        self.help = help_text
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, labels: dict[str, str] | None = None) -> None:
        assert amount >= 0, f"counter {self.name} can only grow, got {amount}"
        with self._lock:
            key = _key(labels)
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, labels: dict[str, str] | None = None) -> float:
        with self._lock:
            return self._values.get(_key(labels), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items()) or [((), 0.0)]
        return self.header() + [f"{self.name}{_fmt_labels(k)} {_fmt_value(v)}" for k, v in items]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            self._values[_key(labels)] = float(value)

    def inc(self, amount: float = 1.0, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            key = _key(labels)
            self._values[key] = self._values.get(key, 0.0) + amount


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Iterable[float]) -> None:
        super().__init__(name, help_text)
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * (len(self.buckets) + 1)  # last slot: +Inf
        self._sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            self._sum += value
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    self._counts[i] += 1
                    break
            else:
                self._counts[-1] += 1

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self._counts)

    def render(self) -> list[str]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        lines = self.header()
        running = 0
        for bound, n in zip(self.buckets + (math.inf,), counts, strict=True):
            running += n
            le = (("le", _fmt_value(bound)),)
            lines.append(f"{self.name}_bucket{_fmt_labels((), le)} {running}")
        lines.append(f"{self.name}_sum {_fmt_value(total)}")
        lines.append(f"{self.name}_count {running}")
        return lines


def render(metrics: Iterable[_Metric]) -> str:
    lines: list[str] = []
    for metric in metrics:
        lines.extend(metric.render())
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[str, float]:
    """Read an exposition back into ``{"name{labels}": value}``; tests and tools use it."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[series] = float(value)
    return out
