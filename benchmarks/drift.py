"""Drift on an unchanged backend, and on a slowed-down one, in virtual time.

Each row profiles the in-process ``gpu`` simulator with the defaults (as ``gptgate profile``
does: one level per band, 50 streamed review calls each), then serves ``--hours`` of steady
traffic unlike the profile's — short single-message prompts, one-off long documents, another
long shared system prompt, ``max_tokens`` 16 to 1,024, half of them not streamed — from
``--concurrency`` workers, with the default ``DriftPolicy``. The steady rows must count 0
episodes; in the slowdown rows the deployment decodes ``--slowdown`` times slower from
``--slow-after`` seconds on, and the first episode must be reported within ``window_s + 2 ×
step_s`` (80 s with the defaults) of the change. See gptgate/sim/drift_run.py and
docs/drift.md.

    python benchmarks/drift.py [--hours 4] [--seeds 1,2,3] [--concurrency 2,8]
                               [--slowdown 1.5] [--slow-after 1800]
"""

from __future__ import annotations

import argparse
import functools
import logging
import shlex
import sys
import time
from collections.abc import Sequence

from gptgate.drift import DriftPolicy
from gptgate.sim import run_virtual
from gptgate.sim.drift_run import DriftRun, run_drift


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _row(kind: str, run: DriftRun, wall_s: float) -> str:
    detected = "-" if run.detected_after_s is None else f"{run.detected_after_s:.0f} s"
    figures = ",".join(run.metrics) or "-"
    return (
        f"| {kind} | {run.concurrency} | {run.seed} | {run.hours:.3g} | {run.calls:,} | "
        f"{run.episodes} | {detected} | {figures} | {wall_s:.1f} s |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=4.0, help="simulated hours per steady row")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--concurrency", default="2,8", help="workers (one band each)")
    parser.add_argument("--slowdown", type=float, default=1.5, help="decode slowdown factor")
    parser.add_argument("--slow-after", type=float, default=1_800.0, metavar="S",
                        help="simulated seconds of healthy traffic before the slowdown")
    args = parser.parse_args(argv)
    logging.getLogger("gptgate").setLevel(logging.ERROR)  # the table says what happened
    policy = DriftPolicy()
    limit_s = policy.window_s + 2 * policy.step
    print("$ python benchmarks/drift.py " + shlex.join(sys.argv[1:] if argv is None else argv))
    print()
    print("| traffic | workers | seed | hours | calls | episodes | detected after | figures "
          "| wall |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = 0
    for concurrency in _ints(args.concurrency):
        for seed in _ints(args.seeds):
            started = time.perf_counter()
            run = run_virtual(functools.partial(
                run_drift, seed=seed, hours=args.hours, concurrency=concurrency,
            ))
            print(_row("steady", run, time.perf_counter() - started), flush=True)
            failed += run.episodes != 0
            started = time.perf_counter()
            slow_hours = (args.slow_after + 600.0) / 3_600.0
            run = run_virtual(functools.partial(
                run_drift, seed=seed, hours=slow_hours, concurrency=concurrency,
                slowdown=args.slowdown, slow_after_s=args.slow_after,
            ))
            print(_row(f"{args.slowdown:g}x slower", run, time.perf_counter() - started),
                  flush=True)
            caught = run.detected_after_s is not None and run.detected_after_s <= limit_s
            failed += not caught
    verdict = "all met" if not failed else f"{failed} missed"
    print(f"\nsteady rows must count 0 episodes; slowdown rows must be detected within "
          f"window_s + 2 x step_s = {limit_s:g} s: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
