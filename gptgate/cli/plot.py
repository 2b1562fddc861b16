"""``sweep.png``: throughput, p50/p99 latency and cost per call against concurrency, the
knee marked and ``auto`` drawn at the limit it ended at. matplotlib (the ``cli`` extra) is
imported only here, with the Agg backend: no display needed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .common import RunFailed, require_extra
from .measure import LevelResult
from .report import find_knee

__all__ = ["check_matplotlib", "write_png"]


def check_matplotlib() -> None:
    """Fail before measuring, not after, when the plot cannot be drawn."""
    require_extra("matplotlib", "sweep.png")


def write_png(rows: Sequence[LevelResult], path: Path, title: str) -> None:
    matplotlib = require_extra("matplotlib", "sweep.png")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixed = sorted((r for r in rows if isinstance(r.concurrency, int) and r.ok),
                   key=lambda r: int(r.concurrency))
    auto = [r for r in rows if r.concurrency == "auto" and r.ok]
    knee = find_knee(rows)
    figure, (top, middle, bottom) = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
    xs = [int(r.concurrency) for r in fixed]
    top.plot(xs, [r.goodput_rps for r in fixed], "o-", label="fixed")
    top.set_ylabel("throughput (req/s)")
    middle.plot(xs, [r.latency(0.5) for r in fixed], "o-", label="p50")
    middle.plot(xs, [r.latency(0.99) for r in fixed], "s--", label="p99")
    middle.set_ylabel("latency (s)")
    bottom.plot(xs, [r.cost_per_call_usd for r in fixed], "o-", label="fixed")
    bottom.set_ylabel("cost per call ($)")
    bottom.set_xlabel("concurrency")
    for row in auto:
        style = {"marker": "*", "markersize": 14, "linestyle": "none", "color": "tab:green"}
        top.plot([row.final_limit], [row.goodput_rps], label=f"auto→{row.final_limit}", **style)
        bottom.plot([row.final_limit], [row.cost_per_call_usd], **style)
    if knee is not None:
        x = int(knee.row.concurrency)
        label = "knee" if knee.confirmed else "best so far"
        for axis in (top, middle, bottom):
            axis.axvline(x, color="tab:red", linestyle=":", linewidth=1)
        top.annotate(f"{label} ({x})", (x, knee.row.goodput_rps), textcoords="offset points",
                     xytext=(6, -14), color="tab:red")
    for axis in (top, middle, bottom):
        axis.grid(True, alpha=0.3)
    top.legend(loc="best")
    middle.legend(loc="best")
    top.set_title(title)
    figure.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
    except OSError as exc:
        raise RunFailed(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(figure)
