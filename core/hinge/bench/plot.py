"""``--plot FILE.png``: output throughput and latency against concurrency, one line per side.

matplotlib is optional (the ``bench`` extra) and imported only here, when a plot is asked for;
the figure is drawn without pyplot (no display, no global state).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hinge.bench.sweep_report import SweepRow

INSTALL_HINT = "pip install 'hinge-llm[bench]' (or pip install matplotlib)"


def require_matplotlib() -> None:
    """Raise ValueError naming the ``bench`` extra when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(f"--plot needs matplotlib, which is not installed; {INSTALL_HINT}, "
                         "or leave out --plot") from None


def plot_sweep(rows: list[SweepRow], path: str | Path, title: str = "") -> Path:
    """Draw output tok/s (left) and p50 TTFT and TPOT in ms (right, log scale) against
    concurrency (log2 axis) for every side; save a PNG at ``path``."""
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    tput, lat = fig.subplots(1, 2)
    sides = list(dict.fromkeys(row.result.name for row in rows))
    for n, side in enumerate(sides):
        color = f"C{n}"  # one colour per side; TTFT dashed, TPOT solid
        mine = [row for row in rows if row.result.name == side]
        xs = [row.concurrency for row in mine]
        tput.plot(xs, [row.result.output_tok_s for row in mine], marker="o", color=color,
                  label=side)
        for key, style in (("ttft_ms", "--"), ("tpot_ms", "-")):
            points = [(row.concurrency, row.latency[key]["p50"]) for row in mine
                      if row.latency[key]["p50"] is not None]
            if points:
                lat.plot(*zip(*points, strict=True), style, marker="o", color=color,
                         label=f"{side} {key[:4].upper()} p50")
    for ax in (tput, lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({row.concurrency for row in rows}),
                      labels=[str(c) for c in sorted({row.concurrency for row in rows})])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    tput.set_ylabel("output tokens/s")
    tput.set_title("throughput")
    lat.set_yscale("log")
    lat.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    lat.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    lat.yaxis.set_minor_formatter(NullFormatter())
    lat.set_ylabel("ms")
    lat.set_title("latency: time to first token, time per output token")
    if title:
        fig.suptitle(title, fontsize=10)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=110)
    return out
