"""The measurement behind ``gptgate demo`` and ``gptgate sweep``: the same job at each
concurrency level, one level after the other, and what each level cost and delivered.

Every level runs the job through a fresh :class:`~gptgate.Gateway` with a fixed limit (or
``concurrency="auto"``), up to 5 attempts per call and no retry budget — as the field clients
retried until every request succeeded — so the rows compare the same completions and the
retries show up as tokens and cost. On the built-in simulator the levels run in virtual time
(simulated seconds cost no wall time, the figures are exact and repeatable); against a URL
they run on the wall clock.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pydantic

from ..clock import Clock, SystemClock
from ..config import Backend, Price
from ..errors import GateError
from ..gateway import Gateway
from ..results import ChatResult, Usage
from .common import RunFailed, UsageError, one_line

__all__ = [
    "DEFAULT_PRICE",
    "Level",
    "LevelResult",
    "Sweep",
    "Target",
    "load_prompts",
    "parse_levels",
    "run_sweep",
    "workload",
]

Level = int | str  # a fixed limit, or "auto"

#: the field figure: $21.50 for 2,150,000 tokens, i.e. $10 per million, input and output alike
DEFAULT_PRICE = Price(input_per_mtok=10.0, cached_input_per_mtok=10.0, output_per_mtok=10.0)
#: attempts per call (the first and up to 4 retries)
MAX_ATTEMPTS = 5


def parse_levels(text: str, *, append_auto: bool = False) -> list[Level]:
    """``"1,5,auto"`` → ``[1, 5, "auto"]``; ``auto`` always comes last (it is compared with
    the fixed levels measured before it). Anything else is a :class:`UsageError`."""
    fixed: list[int] = []
    auto = append_auto
    for token in (t.strip() for t in text.split(",")):
        if token == "auto":
            auto = True
        elif token.isdigit() and int(token) >= 1:
            if int(token) in fixed:
                raise UsageError(f"concurrency {token} is given twice")
            fixed.append(int(token))
        else:
            raise UsageError(f"{token!r} is neither a concurrency >= 1 nor 'auto'")
    levels: list[Level] = list(fixed)
    if auto:
        levels.append("auto")
    if not levels:
        raise UsageError("give at least one concurrency level")
    return levels


@dataclass(frozen=True, slots=True)
class Target:
    """Where the calls go: the in-process simulator (``profile``) or an OpenAI-compatible
    ``base_url`` (its key from ``api_key_env``, called as ``provider``'s preset has it: a
    llama-server's slot caches, a vLLM's signals dialect)."""

    model: str
    profile: str | None = None
    base_url: str | None = None
    price: Price = DEFAULT_PRICE
    #: where the key is read; None: the provider preset's variable (``OPENAI_API_KEY`` for
    #: ``openai``)
    api_key_env: str | None = None
    #: the ``Backend(provider=...)`` preset a ``base_url`` is called with
    provider: str = "openai"
    #: per-attempt timeout, seconds
    timeout_s: float = 60.0
    #: the scenario preset the job runs under (its stream rule, micro-batching, cache ramp)
    scenario: str = "batch_content"

    @property
    def simulated(self) -> bool:
        return self.base_url is None

    def describe(self) -> str:
        if self.base_url is not None:
            return self.base_url
        return f"the built-in simulator (profile '{self.profile}', in-process)"

    def check(self) -> None:
        """Refuse what cannot work before anything runs: an unknown profile, a malformed URL
        (one line, not a validation dump)."""
        if self.profile is not None:
            from ..sim import get_profile

            try:
                get_profile(self.profile)
            except KeyError as exc:
                raise UsageError(str(exc.args[0])) from None
        from ..scenarios import PRESETS

        if self.scenario not in PRESETS:
            known = ", ".join(sorted(PRESETS))
            raise UsageError(f"unknown scenario {self.scenario!r}; known: {known}")
        from ..providers import PROVIDERS

        if self.provider not in PROVIDERS:
            known = ", ".join(PROVIDERS)
            raise UsageError(f"--provider: unknown provider {self.provider!r}; known: {known}")
        if self.base_url is None and self.provider != "openai":
            raise UsageError("--provider names the server behind --base-url; the simulator's "
                             "profiles have their own")
        if self.base_url is not None:
            try:
                self.backend(1)
            except pydantic.ValidationError as exc:
                raise UsageError(f"--base-url: {one_line(exc)}") from None

    def backend(self, concurrency: Level, engine: Any = None) -> Backend:
        if engine is not None:
            from ..sim import SimTransport

            return Backend(
                name=f"sim-{self.profile}",
                base_url="http://127.0.0.1:8000/v1",
                model=self.model,
                hardware=engine.profile.hardware,
                concurrency=concurrency,
                transport=SimTransport(engine),
                price=self.price,
                timeout=self.timeout_s,
            )
        assert self.base_url is not None
        key_env = {} if self.api_key_env is None else {"api_key_env": self.api_key_env}
        return Backend(
            name="endpoint",
            base_url=self.base_url,
            model=self.model,
            provider=self.provider,
            concurrency=concurrency,
            price=self.price,
            timeout=self.timeout_s,
            **key_env,
        )


def workload(
    count: int,
    seed: int,
    *,
    prompts: Sequence[dict[str, Any]] | None = None,
    max_tokens: int = 400,
    stream: bool = False,
) -> list[dict[str, Any]]:
    """``count`` independent requests. Without ``prompts``: a bulk-content job of ~1,900
    prompt tokens sharing a system prompt, ~220 answer tokens (2,150 tokens a call on
    average, as in the field measurement). With ``prompts``: those, round-robin."""
    extra: dict[str, Any] = {"stream": True} if stream else {}
    if prompts:
        items = []
        for i in range(count):
            item = dict(prompts[i % len(prompts)])
            item.setdefault("max_tokens", max_tokens)
            items.append({**item, **extra})
        return items
    system = "You review product descriptions for accuracy and tone. " * 120
    return [
        {
            "messages": [
                {"role": "system", "content": f"[job {seed}-{i}] " + system},
                {"role": "user", "content": f"Review item #{i}: a {i % 7}-part kit, "
                 "steel and oak, for outdoor use."},
            ],
            "max_tokens": max_tokens,
            **extra,
        }
        for i in range(count)
    ]


def load_prompts(path: str) -> list[dict[str, Any]]:
    """A prompt file: one user prompt per line, or one JSON object per line with the chat
    arguments (``{"messages": [...], "max_tokens": 200}``). Blank lines are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM: else line 1 is no JSON
    except OSError as exc:
        raise UsageError(f"--prompt-file: cannot read {path}: {exc.strerror or exc}") from None
    prompts: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"--prompt-file line {number}: bad JSON: {exc.msg}") from None
            if not isinstance(item, dict) or not isinstance(item.get("messages"), list):
                raise UsageError(f"--prompt-file line {number}: a JSON line needs 'messages'")
            prompts.append(item)
        else:
            prompts.append({"messages": [{"role": "user", "content": line}]})
    if not prompts:
        raise UsageError(f"--prompt-file: {path} has no prompt")
    return prompts


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One level of a sweep. Token and cost totals count every attempt billed (retries,
    timeouts, cut streams); the per-call figures divide them by the calls that completed, so
    the waste is in the price of a completed call. Latency is a call's time from leaving the
    client's queue to its answer, retries included; TTFT is measured on streamed calls only."""

    concurrency: Level
    requests: int
    ok: int
    errors: int
    duration_s: float
    latencies_s: tuple[float, ...] = field(repr=False)
    ttfts_s: tuple[float, ...] = field(repr=False)
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_usd: float
    rate_limited: int
    retries: int
    timeouts: int
    #: the limit in force at the end (for "auto": where the adaptive limit landed)
    final_limit: int
    #: why the first failed call failed (one line), if any did
    first_error: str | None = None

    @property
    def label(self) -> str:
        return f"auto→{self.final_limit}" if self.concurrency == "auto" else str(self.concurrency)

    @property
    def goodput_rps(self) -> float:
        """Completed calls per second."""
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def per_call(self, total: float) -> float:
        return total / self.ok if self.ok else math.nan

    @property
    def cost_per_call_usd(self) -> float:
        return self.per_call(self.cost_usd)

    @property
    def mean_latency_s(self) -> float:
        return sum(self.latencies_s) / len(self.latencies_s) if self.latencies_s else math.nan

    def latency(self, q: float) -> float:
        return percentile(self.latencies_s, q)

    def ttft(self, q: float) -> float:
        return percentile(self.ttfts_s, q)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(slots=True)
class Sweep:
    """The levels measured, in order. ``interrupted``: Ctrl-C stopped it (the level in
    progress is not in ``rows``); ``warnings``: the levels where every call failed (kept: a
    fall to nothing is part of the curve); ``failure``: why the run failed (no call of any
    level completed)."""

    target: Target
    levels: list[Level]
    requests: int
    rows: list[LevelResult] = field(default_factory=list)
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)
    failure: str | None = None
    wall_s: float = 0.0


#: reports progress: (calls done in this level, calls in this level, level index, level)
ProgressHook = Callable[[int, int, int, Level], None]


async def measure_level(
    target: Target,
    concurrency: Level,
    items: Sequence[dict[str, Any]],
    *,
    seed: int,
    max_attempts: int = MAX_ATTEMPTS,
    on_progress: Callable[[int], None] | None = None,
) -> LevelResult:
    """Run ``items`` at ``concurrency`` and measure the level."""
    clock: Clock
    engine: Any = None
    if target.simulated:
        from ..sim import LoopClock, SimEngine

        # LoopClock under run_virtual(): the loop's clock jumps to the next timer when idle
        clock = LoopClock()
        assert target.profile is not None
        engine = SimEngine(target.profile, clock=clock, seed=seed)
    else:
        clock = SystemClock()
    backend = target.backend(concurrency, engine)
    async with Gateway(
        [backend], clock=clock, seed=seed, max_attempts=max_attempts, retry_budget_ratio=None
    ) as gate:
        start = clock.now()
        # progress is told as each call ends: a watcher waking on a timer would add events
        # to the simulated run and change what it measures (the figures of a quiet run)
        results = await gate.map(items, scenario=target.scenario,
                                 on_result=None if on_progress is None else _Ends(on_progress))
        if on_progress is not None:
            on_progress(len(results))
        duration = clock.now() - start
        stats = gate.stats()[backend.name]
    ok = [r for r in results if isinstance(r, ChatResult)]
    failed = [r for r in results if isinstance(r, GateError)]
    if engine is not None:  # the server's own bill: what the work really cost
        billed = engine.ledger.snapshot()
        tokens = (billed.input_tokens, billed.cached_input_tokens, billed.output_tokens)
    else:  # the client's ledger: every attempt that may have been billed
        tokens = (stats.input_tokens, stats.cached_input_tokens, stats.output_tokens)
    price = target.price
    cost = price.cost(
        Usage(input_tokens=tokens[0], cached_input_tokens=tokens[1], output_tokens=tokens[2])
    )
    return LevelResult(
        concurrency=concurrency,
        requests=len(items),
        ok=len(ok),
        errors=len(failed),
        duration_s=duration,
        latencies_s=tuple(r.latency_s - r.queue_s for r in ok),
        ttfts_s=tuple(r.ttft_s for r in ok if r.ttft_s is not None),
        input_tokens=tokens[0],
        cached_input_tokens=tokens[1],
        output_tokens=tokens[2],
        cost_usd=cost,
        rate_limited=stats.rate_limited,
        retries=stats.retries,
        timeouts=stats.timeouts,
        final_limit=stats.limit,
        first_error=one_line(failed[0]) if failed else None,
    )


class _Ends:
    """``gate.map``'s ``on_result``: the calls ended so far, to a progress hook."""

    def __init__(self, report: Callable[[int], None]) -> None:
        self.report = report
        self.done = 0

    def __call__(self, index: int, outcome: ChatResult | GateError) -> None:
        self.done += 1
        self.report(self.done)


def preflight(target: Target, item: dict[str, Any], seed: int) -> None:
    """One call to a URL before the sweep: an endpoint that cannot answer (refused, wrong
    path, bad key) ends the run with one line saying why, not with a table of failures."""
    if target.simulated:
        return
    probe = {**item, "max_tokens": 1}
    probe.pop("stream", None)
    # the default scenario sends it at once (a batching scenario would hold it for company)
    alone = dataclasses.replace(target, scenario="default")
    result = anyio.run(
        functools.partial(measure_level, alone, 1, [probe], seed=seed, max_attempts=2)
    )
    if result.ok == 0:
        raise RunFailed(f"{target.base_url} did not answer a test call: {result.first_error}")


def run_sweep(
    target: Target,
    levels: Sequence[Level],
    items: Sequence[dict[str, Any]],
    *,
    seed: int,
    on_progress: ProgressHook | None = None,
) -> Sweep:
    """Measure every level in turn. Ctrl-C stops at once and keeps the levels done (the sweep
    says ``interrupted``); a URL that fails its test call raises :class:`RunFailed` before
    any level runs."""
    sweep = Sweep(target, list(levels), len(items))
    wall = time.perf_counter()
    try:
        preflight(target, items[0], seed)
        for index, level in enumerate(levels):
            hook = (
                None
                if on_progress is None
                else functools.partial(_level_progress, on_progress, len(items), index, level)
            )
            run = functools.partial(measure_level, target, level, items, seed=seed,
                                    on_progress=hook)
            if target.simulated:
                from ..sim import run_virtual

                row = run_virtual(run)
            else:
                row = anyio.run(run)
            sweep.rows.append(row)
            if row.ok == 0:
                sweep.warnings.append(f"every call at concurrency {level} failed: "
                                      f"{row.first_error}")
    except KeyboardInterrupt:
        sweep.interrupted = True
    finally:
        sweep.wall_s = time.perf_counter() - wall
    if sweep.rows and not any(row.ok for row in sweep.rows):
        sweep.failure = f"every call failed: {sweep.rows[0].first_error}"
    return sweep


def _level_progress(hook: ProgressHook, total: int, index: int, level: Level, done: int) -> None:
    hook(done, total, index, level)
