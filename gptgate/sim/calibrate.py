"""Calibrate a profile against the field U-curve (docs/background.md) seen by a *naive* client.

    python -m gptgate.sim.calibrate --profile hosted            # ScaledClock, per-row scale
    python -m gptgate.sim.calibrate --profile hosted --virtual  # exact, virtual time

The client is deliberately what the field reports measured: a plain ``httpx2.AsyncClient`` on
a :class:`SimTransport`, a fixed ``anyio.CapacityLimiter(c)``, up to 3 attempts on 429/5xx/
read errors/timeouts with ``0.5·2ⁿ`` s back-off honouring ``retry-after`` (while still
holding its permit, as a naive client does), and a 60 s per-attempt timeout. Every figure is
in simulated seconds; billed tokens come from the engine's ledger.

With a :class:`ScaledClock` each millisecond of CPU becomes ``scale`` ms of simulated time, so
the scale is chosen per row to keep the real request rate (and the distortion) low; with
``--virtual`` the loop's clock jumps between timers and the table is exact and repeatable.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from gptgate.clock import Clock, ScaledClock
from gptgate.sim.engine import SimEngine
from gptgate.sim.profiles import SimProfile, get_profile
from gptgate.sim.transport import SimTransport
from gptgate.sim.virtual import LoopClock, run_virtual

__all__ = [
    "CONCURRENCY",
    "Row",
    "format_table",
    "main",
    "make_prompts",
    "run_row",
    "with_overrides",
]

CONCURRENCY = (1, 5, 10, 20, 30, 50, 80)
ATTEMPTS = 3
TIMEOUT_S = 60.0
SYSTEM_PROMPT = "You are a careful assistant. Answer the user's request concisely and exactly."


@dataclass(frozen=True, slots=True)
class Row:
    """One concurrency level of the table (simulated seconds)."""

    concurrency: int
    requests: int
    succeeded: int
    total_s: float
    mean_latency_s: float
    p99_latency_s: float
    billed_tokens: int
    rate_limited: int
    server_errors: int
    abandoned: int
    interrupted: int
    wall_s: float

    @property
    def throughput(self) -> float:
        return self.succeeded / self.total_s if self.total_s > 0 else 0.0

    @property
    def tokens_per_request(self) -> float:
        return self.billed_tokens / self.requests if self.requests else 0.0


def make_prompts(n: int, *, prompt_tokens: int = 1900, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` distinct chat prompts of about ``prompt_tokens`` tokens (no shared cacheable
    prefix: this table measures concurrency, not caching)."""
    rng = random.Random(seed)
    vocabulary = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    words = vocabulary.split()
    pool = " ".join(rng.choice(words) for _ in range(8000))
    chars = prompt_tokens * 4
    prompts = []
    for i in range(n):
        start = rng.randrange(0, len(pool) - chars)
        user = f"Request {i}: summarise this. " + pool[start : start + chars - 40]
        prompts.append(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
        )
    return prompts


def _retry_after(response: httpx2.Response) -> float | None:
    ms = response.headers.get("retry-after-ms")
    if ms is not None:
        return float(ms) / 1000.0
    s = response.headers.get("retry-after")
    return float(s) if s is not None else None


async def run_row(
    profile: SimProfile,
    concurrency: int,
    prompts: Sequence[list[dict[str, str]]],
    clock: Clock,
    *,
    seed: int = 0,
) -> Row:
    """Send every prompt once through the naive client at ``concurrency``; a fresh engine."""
    engine = SimEngine(profile, clock=clock, seed=seed)
    limiter = anyio.CapacityLimiter(concurrency)
    latencies: list[float] = []
    succeeded = 0

    async def one(client: httpx2.AsyncClient, messages: list[dict[str, str]]) -> None:
        nonlocal succeeded
        async with limiter:
            start = clock.now()
            for attempt in range(ATTEMPTS):
                wait: float | None = None
                try:
                    with anyio.fail_after(clock.to_real(TIMEOUT_S)):
                        r = await client.post(
                            "/chat/completions", json={"model": profile.model, "messages": messages}
                        )
                        await r.aread()
                    if r.status_code == 200:
                        succeeded += 1
                        break
                    if r.status_code != 429 and r.status_code < 500:
                        break
                    wait = _retry_after(r)
                except (httpx2.TransportError, TimeoutError):
                    pass
                backoff = 0.5 * 2**attempt
                if attempt + 1 < ATTEMPTS:
                    await clock.sleep(max(backoff, wait or 0.0))
            latencies.append(clock.now() - start)

    wall = time.perf_counter()
    t0 = clock.now()
    transport = SimTransport(engine)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://sim/v1") as client,
        anyio.create_task_group() as tg,
    ):
        for messages in prompts:
            tg.start_soon(one, client, messages)
    total = clock.now() - t0
    led = engine.ledger.snapshot()
    latencies.sort()
    return Row(
        concurrency=concurrency,
        requests=len(prompts),
        succeeded=succeeded,
        total_s=total,
        mean_latency_s=sum(latencies) / len(latencies),
        p99_latency_s=latencies[min(len(latencies) - 1, math.ceil(0.99 * len(latencies)) - 1)],
        billed_tokens=led.billed_tokens,
        rate_limited=led.rate_limited,
        server_errors=led.server_errors,
        abandoned=led.abandoned,
        interrupted=led.interrupted,
        wall_s=time.perf_counter() - wall,
    )


def format_table(rows: Sequence[Row]) -> str:
    head = (
        f"{'c':>3} {'reqs':>5} {'ok':>5} {'total s':>8} {'mean s':>7} {'p99 s':>7} {'req/s':>6} "
        f"{'billed tok':>11} {'tok/req':>7} {'429':>4} {'5xx':>4} {'aband':>5} {'intr':>4} "
        f"{'wall s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.concurrency:>3} {r.requests:>5} {r.succeeded:>5} {r.total_s:>8.1f} "
            f"{r.mean_latency_s:>7.2f} {r.p99_latency_s:>7.2f} {r.throughput:>6.2f} "
            f"{r.billed_tokens:>11,} {r.tokens_per_request:>7.0f} {r.rate_limited:>4} "
            f"{r.server_errors:>4} {r.abandoned:>5} {r.interrupted:>4} {r.wall_s:>6.1f}"
        )
    return "\n".join(lines)


def with_overrides(profile: SimProfile, assignments: Sequence[str]) -> SimProfile:
    """``profile`` with ``knob=value`` overrides, validated like the profile itself."""
    updates: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects KNOB=VALUE, got {item!r}")
        updates[key.strip()] = None if value.strip().lower() == "none" else value.strip()
    return SimProfile.model_validate({**profile.model_dump(), **updates})


def _scaled_clock_for(concurrency: int, max_scale: float, rate_budget: float) -> Clock:
    """A ScaledClock whose expected real request rate stays under ``rate_budget``/s (about
    2 s per call): higher concurrency → more CPU per simulated second → smaller scale."""
    return ScaledClock(min(max_scale, rate_budget * 2.0 / concurrency))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m gptgate.sim.calibrate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--profile", default="hosted")
    ap.add_argument("--requests", type=int, default=500, help="requests per row")
    ap.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--virtual", action="store_true", help="exact virtual time (no wall time)")
    ap.add_argument("--max-scale", type=float, default=100.0)
    ap.add_argument(
        "--rate-budget",
        type=float,
        default=150.0,
        help="target real requests/s per row in ScaledClock mode",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a profile knob, e.g. --set usl_kappa=0.004 (repeatable)",
    )
    args = ap.parse_args(argv)

    profile = with_overrides(get_profile(args.profile), args.set)
    prompts = make_prompts(args.requests, seed=args.seed)
    rows: list[Row] = []
    for c in args.concurrency:
        if args.virtual:
            rows.append(run_virtual(_row_virtual, profile, c, prompts, args.seed))
        else:
            clock = _scaled_clock_for(c, args.max_scale, args.rate_budget)
            rows.append(anyio.run(_row_scaled, profile, c, prompts, clock, args.seed))
        print(
            format_table(rows[-1:]).splitlines()[-1] if len(rows) > 1 else format_table(rows),
            flush=True,
        )


async def _row_virtual(profile: SimProfile, c: int, prompts: Any, seed: int) -> Row:
    return await run_row(profile, c, prompts, LoopClock(), seed=seed)


async def _row_scaled(profile: SimProfile, c: int, prompts: Any, clock: Clock, seed: int) -> Row:
    return await run_row(profile, c, prompts, clock, seed=seed)


if __name__ == "__main__":
    main()
