"""``gptgate`` command line: ``demo``, ``sim serve``.

``gptgate demo`` reproduces SEEDS §1 — the concurrency U-curve — on the built-in simulator in
well under a minute, with no key and no network, and then runs the same job with
``concurrency="auto"`` to show where gptgate's adaptive limit lands without being told;
``--base-url`` runs it against a real endpoint.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .clock import Clock, SystemClock
from .config import Backend, Price
from .errors import GateError
from .gateway import Gateway
from .results import ChatResult

__all__ = ["main"]

DEFAULT_LEVELS = "1,5,10,20,30,50,80,auto"
#: SEEDS §1: $21.50 for 2,150,000 tokens → $10 per million, input and output alike
DEMO_PRICE = Price(input_per_mtok=10.0, cached_input_per_mtok=10.0, output_per_mtok=10.0)


Level = int | str  # a fixed limit, or "auto"


def parse_levels(text: str) -> list[Level]:
    """``"1,5,auto"`` → ``[1, 5, "auto"]``; anything else is a clear ``ValueError``."""
    levels: list[Level] = []
    for token in (t.strip() for t in text.split(",")):
        if token == "auto":
            levels.append("auto")
        elif token.isdigit() and int(token) >= 1:
            levels.append(int(token))
        else:
            raise ValueError(f"--levels: {token!r} is neither a concurrency >= 1 nor 'auto'")
    if not levels:
        raise ValueError("--levels: give at least one level")
    return levels


@dataclass(frozen=True, slots=True)
class Row:
    concurrency: Level
    total_s: float
    mean_latency_s: float
    throughput: float
    tokens: int
    cost_usd: float
    failed: int
    retries: int
    #: the limit in force at the end (for "auto": where the adaptive limit landed)
    final_limit: int = 0

    @property
    def label(self) -> str:
        return f"auto→{self.final_limit}" if self.concurrency == "auto" else str(self.concurrency)


def _workload(count: int, seed: int) -> list[dict[str, Any]]:
    """Independent requests of a bulk-content job: ~1,900 prompt tokens, ~220 answer tokens
    (SEEDS §1: 2,150 tokens a call on average)."""
    system = "You review product descriptions for accuracy and tone. " * 120
    return [
        {
            "messages": [
                {"role": "system", "content": f"[job {seed}-{i}] " + system},
                {"role": "user", "content": f"Review item #{i}: a {i % 7}-part kit, "
                 "steel and oak, for outdoor use."},
            ],
            "max_tokens": 400,
        }
        for i in range(count)
    ]


def _progress(total_rows: int) -> Any:
    try:
        from rich.progress import Progress
    except ImportError:
        return None
    progress = Progress(transient=True)
    progress.start()
    progress.add_task("concurrency sweep", total=total_rows)
    return progress


async def _run_row(
    concurrency: Level,
    requests: int,
    *,
    base_url: str | None,
    model: str,
    profile: str,
    seed: int,
) -> Row:
    clock: Clock
    if base_url is None:
        from .sim import LoopClock, SimEngine, SimTransport

        # run under run_virtual(): the loop's clock jumps to the next timer when idle, so
        # simulated seconds cost no wall time and the figures are exact and repeatable
        clock = LoopClock()
        engine = SimEngine(profile, clock=clock, seed=seed)
        backend = Backend(
            name=f"sim-{profile}",
            base_url="http://127.0.0.1:8000/v1",
            model=model,
            hardware=engine.profile.hardware,
            concurrency=concurrency,
            transport=SimTransport(engine),
            price=DEMO_PRICE,
            timeout=60.0,
        )
    else:
        clock = SystemClock()
        engine = None
        backend = Backend(
            name="endpoint", base_url=base_url, model=model, concurrency=concurrency,
            price=DEMO_PRICE,
        )
    items = _workload(requests, seed)
    # SEEDS §1's clients retried until every request succeeded: no retry budget here, so the
    # rows compare the same 1,000 completions and the retries show up as tokens and cost
    async with Gateway(
        [backend], clock=clock, seed=seed, max_attempts=5, retry_budget_ratio=None
    ) as gate:
        start = clock.now()
        results = await gate.map(items, scenario="batch_content")
        total = clock.now() - start
        stats = gate.stats()[backend.name]
    ok = [r for r in results if isinstance(r, ChatResult)]
    failed = len(results) - len(ok)
    if engine is not None:
        billed = engine.ledger.snapshot()
        tokens = billed.input_tokens + billed.output_tokens
    else:
        tokens = stats.input_tokens + stats.output_tokens
    # the backend's latency per request (SEEDS §1), not the time a call queued in the client
    mean_latency = sum(r.latency_s - r.queue_s for r in ok) / len(ok) if ok else float("nan")
    return Row(
        concurrency=concurrency,
        total_s=total,
        mean_latency_s=mean_latency,
        throughput=len(ok) / total if total > 0 else 0.0,
        tokens=tokens,
        cost_usd=DEMO_PRICE.output_per_mtok * tokens / 1_000_000,
        failed=failed,
        retries=stats.retries,
        final_limit=stats.limit,
    )


def format_table(rows: Sequence[Row]) -> str:
    header = (
        f"{'concurrency':>11} {'total time':>11} {'mean latency':>13} {'throughput':>13} "
        f"{'total tokens':>13} {'cost':>9} {'retries':>8} {'failed':>7}"
    )
    lines = [header, "-" * len(header)]
    best = _best_fixed(rows)
    for r in rows:
        mark = "  <- knee" if r is best else ""
        lines.append(
            f"{r.label:>11} {r.total_s:>10.0f}s {r.mean_latency_s:>12.2f}s "
            f"{r.throughput:>8.2f} req/s {r.tokens:>13,} {'$' + format(r.cost_usd, '.2f'):>9} "
            f"{r.retries:>8} {r.failed:>7}{mark}"
        )
    return "\n".join(lines)


def _best_fixed(rows: Sequence[Row]) -> Row | None:
    fixed = [r for r in rows if r.concurrency != "auto"]
    return max(fixed, key=lambda r: r.throughput) if fixed else None


def _summary(rows: Sequence[Row]) -> str:
    best = _best_fixed(rows)
    auto = next((r for r in rows if r.concurrency == "auto"), None)
    lines = []
    if best is not None:
        lines.append(
            f"Throughput peaks at concurrency {best.concurrency}; past it, calls wait, retry "
            "and cost more."
        )
    if auto is not None and best is not None and best.throughput > 0:
        lines.append(
            f"concurrency='auto' (the default) found its limit online, {auto.final_limit} at the "
            f"end:\n{auto.throughput:.2f} req/s ({auto.throughput / best.throughput:.0%} of the "
            f"best fixed) for ${auto.cost_usd:.2f} (best fixed: ${best.cost_usd:.2f})."
        )
    elif auto is None:
        lines.append("Use concurrency='auto' (the default) to find that knee online.")
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    base_url = args.base_url
    if base_url is None and os.environ.get("OPENAI_API_KEY") and args.real:
        base_url = "https://api.openai.com/v1"
    levels = parse_levels(args.levels)
    where = base_url or f"the built-in simulator (profile '{args.profile}', in-process)"
    print(f"gptgate demo: {args.requests} requests per row against {where}")
    print("fixed concurrency per row (auto: gptgate's adaptive limit), up to 5 attempts per call"
          " (no retry\nbudget, as the seed's clients); times are in the backend's (simulated)"
          " seconds\n")
    progress = _progress(len(levels)) if not args.quiet else None
    rows: list[Row] = []
    wall = time.perf_counter()
    try:
        for level in levels:
            row = functools.partial(
                _run_row,
                level,
                args.requests,
                base_url=base_url,
                model=args.model,
                profile=args.profile,
                seed=args.seed,
            )
            if base_url is None:
                from .sim import run_virtual

                rows.append(run_virtual(row))
            else:
                rows.append(anyio.run(row))
            if progress is not None:
                progress.advance(progress.task_ids[0])
            elif not args.quiet:
                print(f"  concurrency {level!s:>4}: done", file=sys.stderr)
    finally:
        if progress is not None:
            progress.stop()
    print(format_table(rows))
    print(f"\n{_summary(rows)}\n(wall time {time.perf_counter() - wall:.1f}s)")
    return 0


def _sim_serve(args: argparse.Namespace) -> int:
    from .sim import serve

    serve(args.profile, host=args.host, port=args.port, time_scale=args.time_scale, seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gptgate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="the concurrency U-curve on the simulator")
    demo.add_argument("--requests", type=int, default=1000, help="requests per row")
    demo.add_argument(
        "--levels", default=DEFAULT_LEVELS, help="fixed concurrencies; 'auto': the adaptive limit"
    )
    demo.add_argument("--profile", default="hosted", help="simulator profile")
    demo.add_argument("--model", default="gpt-5.5")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument(
        "--base-url", default=None, help="a real OpenAI-compatible endpoint (uses OPENAI_API_KEY)"
    )
    demo.add_argument(
        "--real", action="store_true", help="with OPENAI_API_KEY set: call api.openai.com"
    )
    demo.add_argument("--quiet", action="store_true")
    demo.set_defaults(handler=_demo)

    sim = commands.add_parser("sim", help="the simulated backend")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True)
    serve = sim_commands.add_parser("serve", help="serve the simulator over HTTP on loopback")
    serve.add_argument("--profile", default="gpu")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--time-scale", type=float, default=1.0)
    serve.add_argument("--seed", type=int, default=0)
    serve.set_defaults(handler=_sim_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.handler(args)
    except (GateError, RuntimeError) as error:  # a missing extra, a failed call
        print(f"gptgate: {error}", file=sys.stderr)
        return 1
    except KeyError as error:  # an unknown simulator profile
        print(f"gptgate: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2
    except ValueError as error:  # a bad option value
        print(f"gptgate: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    raise SystemExit(main())
