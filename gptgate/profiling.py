"""``gptgate profile``: measure each backend per concurrency band and keep it as a baseline.

For every backend and every level (by default one per band: 2, 8, 24, 48 calls in flight),
:func:`profile` runs ``requests`` streamed calls with exactly that many in flight (a fixed
limit, one attempt per call, no retries to blur the figures) and keeps latency and TTFT
percentiles, output tokens/s and the prompt-cache hit rate in a :class:`Baseline`. A gateway
given that file (``Gateway(baseline=...)``) then warns when a backend leaves it (docs/drift.md).

The workload is a short review job: every call shares one system prompt (so the backend's
prompt cache is exercised, as in most real traffic) and asks about a different item. Pass
``prompts=`` to profile with your own messages.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from .baseline import BANDS, BackendBaseline, BandFigures, Baseline, band_of
from .cache import prefix_key
from .clock import Clock
from .config import Backend, GatewayConfig
from .drift_measure import CacheableCalls, decode_part
from .errors import GateError
from .gateway import Gateway
from .results import ChatResult

__all__ = [
    "DEFAULT_LEVELS",
    "ProfileError",
    "add_profile_arguments",
    "profile",
    "run_profile",
]

#: one representative concurrency per band (gptgate/baseline.py)
DEFAULT_LEVELS: tuple[int, ...] = tuple(band.level for band in BANDS)
DEFAULT_REQUESTS = 50
DEFAULT_MAX_TOKENS = 256

Messages = Sequence[Mapping[str, Any]]
#: told (backend name, level, calls done, calls in the level) as calls end
Progress = Callable[[str, int, int, int], None]

_SYSTEM = (
    "You review product descriptions for accuracy, tone and missing safety information. "
    "Answer with a short verdict and at most three concrete fixes. "
) * 40  # ~1,400 tokens: past the 1,024 a provider caches from


class ProfileError(GateError):
    """A profile that measured nothing for some backend (every call failed)."""


def default_prompts(count: int) -> list[list[dict[str, str]]]:
    """``count`` calls of the built-in workload: one shared system prompt, distinct items."""
    return [
        [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"Review item #{i}: a {i % 7}-part kit, steel and oak, "
             "for outdoor use."},
        ]
        for i in range(count)
    ]


def _check_count(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_levels(levels: object) -> tuple[int, ...]:
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence) or not levels:
        raise ValueError(f"levels must be a non-empty sequence of ints >= 1, got {levels!r}")
    checked = tuple(_check_count("each level", level) for level in levels)
    bands = [band_of(level) for level in checked]
    repeated = sorted({b for b in bands if bands.count(b) > 1})
    if repeated:
        raise ValueError(
            f"levels {list(checked)} measure band {repeated[0]} twice: give one level per band "
            f"({', '.join(b.name for b in BANDS)})"
        )
    return checked


async def profile(
    config_or_gateway: GatewayConfig | Gateway,
    *,
    levels: Sequence[int] = DEFAULT_LEVELS,
    requests: int = DEFAULT_REQUESTS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    prompts: Sequence[Messages] | None = None,
    clock: Clock | None = None,
    on_progress: Progress | None = None,
) -> Baseline:
    """Measure every backend of the configuration (or of a gateway's: it is not opened, each
    level runs on a gateway of its own with that fixed limit) at each level.

    A level whose calls all failed is left out of the baseline; a backend with no level
    measured is a :class:`ProfileError` naming the first failure. ``clock`` defaults to the
    gateway's (a ``LoopClock`` under ``run_virtual`` profiles the simulator in no wall time).
    """
    if isinstance(config_or_gateway, Gateway):
        config = config_or_gateway.config
        clock = clock or config_or_gateway.clock
    elif isinstance(config_or_gateway, GatewayConfig):
        config = config_or_gateway
    else:
        raise TypeError(
            f"profile() takes a GatewayConfig or a Gateway, got {type(config_or_gateway).__name__}"
        )
    checked_levels = _check_levels(levels)
    _check_count("requests", requests)
    _check_count("max_tokens", max_tokens)
    workload = list(prompts) if prompts is not None else default_prompts(requests)
    if not workload:
        raise ValueError("prompts must hold at least one list of messages")
    backends: list[BackendBaseline] = []
    for backend in config.backends:
        bands: dict[str, BandFigures] = {}
        first_error: GateError | None = None
        served = CacheableCalls()  # the backend's prompt cache outlives a level, as live
        for level in checked_levels:
            figures, error = await _measure(
                config, backend, level, requests, max_tokens, workload, clock, on_progress,
                served,
            )
            if figures is not None:
                bands[band_of(level)] = figures
            first_error = first_error or error
        if not bands:
            why = f": {first_error}" if first_error is not None else ""
            raise ProfileError(f"every call to backend {backend.name!r} failed{why}")
        backends.append(BackendBaseline(
            name=backend.name, base_url=backend.base_url, model=backend.model,
            hardware=backend.hardware, bands=bands,
        ))
    return Baseline(backends=backends)


async def _measure(
    config: GatewayConfig,
    backend: Backend,
    level: int,
    requests: int,
    max_tokens: int,
    workload: Sequence[Messages],
    clock: Clock | None,
    on_progress: Progress | None,
    served: CacheableCalls,
) -> tuple[BandFigures | None, GateError | None]:
    """``requests`` calls with exactly ``level`` in flight on ``backend`` alone."""
    pinned = Backend(**{**dict(backend), "concurrency": level})
    gateway_config = config.model_copy(update={
        "backends": [pinned], "max_attempts": 1, "retry_budget_ratio": None,
        "keep_warm": False, "shared": None,
    })
    results: list[ChatResult] = []
    #: per result: when it ended and its messages (which calls could hit the cache)
    ends: list[tuple[float, Messages]] = []
    errors: list[GateError] = []
    next_index = iter(range(requests))

    async with Gateway(config=gateway_config, clock=clock) as gate:

        async def worker() -> None:
            for index in next_index:
                try:
                    result = await gate.chat(
                        workload[index % len(workload)], backend=pinned.name, stream=True,
                        max_tokens=max_tokens, hedge=False,
                    )
                except GateError as error:
                    errors.append(error)
                else:
                    results.append(result)
                    ends.append((gate.clock.now(), workload[index % len(workload)]))
                if on_progress is not None:
                    on_progress(backend.name, level, len(results) + len(errors), requests)

        async with anyio.create_task_group() as group:
            for _ in range(min(level, requests)):
                group.start_soon(worker)
    if not results:
        return None, errors[0] if errors else None
    return _figures(level, results, ends, len(errors), served), errors[0] if errors else None


def _figures(
    level: int,
    results: Sequence[ChatResult],
    ends: Sequence[tuple[float, Messages]],
    failures: int,
    served: CacheableCalls,
) -> BandFigures:
    """The band's figures; decode speed and hit rate measured as the live watch measures
    them (gptgate/drift_measure.py)."""
    latencies = sorted(max(0.0, r.latency_s - r.queue_s) for r in results)
    ttfts = sorted(r.ttft_s for r in results if r.ttft_s is not None)
    output = sum(r.usage.output_tokens for r in results)
    total_latency = sum(latencies)
    decodes = [
        d for r in results
        if (d := decode_part(r.latency_s - r.queue_s, r.ttft_s, r.usage.output_tokens))
    ]
    decode_s = sum(d.seconds for d in decodes)
    measured = [r.usage for r in results if not r.usage.estimated]
    uncached = sum(u.input_tokens - u.cached_input_tokens for u in measured)
    cacheable, cached = 0, 0
    for (ended, messages), result in sorted(zip(ends, results, strict=True), key=_ended):
        usage = result.usage
        if usage.estimated:
            continue
        part = served.cacheable(
            prefix_key(messages), usage.input_tokens,
            started=ended - (result.latency_s - result.queue_s), ended=ended,
        )
        cacheable += part
        cached += min(usage.cached_input_tokens, part)
    return BandFigures(
        concurrency=level,
        latency_p50_s=_quantile(latencies, 0.50),
        latency_p95_s=_quantile(latencies, 0.95),
        latency_p99_s=_quantile(latencies, 0.99),
        ttft_p50_s=_quantile(ttfts, 0.50) if ttfts else None,
        ttft_p95_s=_quantile(ttfts, 0.95) if ttfts else None,
        ttft_p99_s=_quantile(ttfts, 0.99) if ttfts else None,
        output_tokens_per_s=output / total_latency if total_latency > 0 else None,
        decode_tokens_per_s=sum(d.tokens for d in decodes) / decode_s if decode_s > 0 else None,
        output_tokens_mean=output / len(results),
        uncached_input_tokens_mean=uncached / len(measured) if measured else None,
        cache_hit_rate=cached / cacheable if cacheable > 0 else None,
        samples=len(results),
        failures=failures,
        measured_at=datetime.now(UTC),
    )


def _ended(item: tuple[tuple[float, Messages], ChatResult]) -> float:
    return item[0][0]


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the samples at or below it."""
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


# -- the command line -------------------------------------------------------------------------

_EXAMPLES = """\
examples:
  gptgate profile --config gateway.toml --out baseline.json
  gptgate profile --config gateway.json --out baseline.json --levels 1,10,30 --requests 200
  gptgate profile --config gateway.toml --out baseline.json --json | jq .backends[0]

The config file holds GatewayConfig fields, e.g. in TOML:
  [[backends]]
  name = "gpu-a"
  base_url = "http://127.0.0.1:8000/v1"
  model = "llama-3-8b"
  hardware = "gpu"
Keys come from the environment (api_key_env, OPENAI_API_KEY by default).
Then: Gateway(..., baseline="baseline.json") warns when a backend drifts from it.
"""


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``gptgate profile`` (the caller wires the parser in as a subcommand)."""
    parser.description = (
        "Measure each configured backend at one concurrency per band (latency and TTFT\n"
        "p50/p95/p99, output tokens/s, cache hit rate) and write the baseline that\n"
        "Gateway(baseline=...) watches for drift."
    )
    parser.epilog = _EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="TOML or JSON file of GatewayConfig fields (backends = [...])")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="where to write the baseline (JSON, replaced atomically)")
    default_levels = ",".join(str(level) for level in DEFAULT_LEVELS)
    parser.add_argument(
        "--levels", default=default_levels, metavar="N,N,...",
        help=f"concurrencies to measure, at most one per band "
             f"({', '.join(b.name for b in BANDS)}); default {default_levels}",
    )
    parser.add_argument("--requests", default=str(DEFAULT_REQUESTS), metavar="N",
                        help=f"calls per backend and level (default {DEFAULT_REQUESTS})")
    parser.add_argument("--max-tokens", default=str(DEFAULT_MAX_TOKENS), metavar="M",
                        help=f"max_tokens of each call (default {DEFAULT_MAX_TOKENS})")
    parser.add_argument("--json", action="store_true",
                        help="print the baseline as JSON on stdout instead of a table")


class _UsageError(ValueError):
    """Bad usage: exit status 2."""


def _parse_int(option: str, text: object) -> int:
    value = str(text).strip()
    if not value.lstrip("-").isdigit() or int(value) < 1:
        raise _UsageError(f"{option} must be an integer >= 1, got {value!r}")
    return int(value)


def _parse_levels(text: object) -> tuple[int, ...]:
    tokens = [t.strip() for t in str(text).split(",") if t.strip()]
    if not tokens:
        raise _UsageError("--levels: give at least one concurrency, e.g. 2,8,24,48")
    levels = tuple(_parse_int("--levels", token) for token in tokens)
    try:
        return _check_levels(levels)
    except ValueError as error:
        raise _UsageError(f"--levels: {error}") from None


def run_profile(args: argparse.Namespace) -> int:
    """``gptgate profile``: 0 written, 1 a failed run, 2 bad usage; errors are one line on
    stderr."""
    from .cli.common import out_problem
    from .config_file import load_config

    try:
        levels = _parse_levels(args.levels)
        requests = _parse_int("--requests", args.requests)
        max_tokens = _parse_int("--max-tokens", args.max_tokens)
        config = load_config(args.config)
        out = Path(args.out)
        if (problem := out_problem(out, directory=False)) is not None:
            raise _UsageError(f"--out {args.out}: {problem}")
    except ValueError as error:  # _UsageError, ConfigFileError
        print(f"gptgate profile: {error}", file=sys.stderr)
        return 2
    progress = None if args.json else _progress(len(config.backends) * len(levels) * requests)
    try:
        baseline = anyio.run(lambda: profile(
            config, levels=levels, requests=requests, max_tokens=max_tokens,
            on_progress=progress.advance if progress is not None else None,
        ))
    except GateError as error:
        print(f"gptgate profile: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gptgate profile: interrupted, nothing written", file=sys.stderr)
        return 130
    finally:
        if progress is not None:
            progress.stop()
    try:
        baseline.save(out)
    except OSError as error:
        print(f"gptgate profile: {args.out}: not written ({error.strerror or error})",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(baseline.model_dump(mode="json"), indent=1))
    else:
        print(format_baseline(baseline))
        print(f"\nbaseline written to {os.fspath(out)}")
    return 0


def format_baseline(baseline: Baseline) -> str:
    """A table: one row per backend and band."""
    header = (
        f"{'backend':<16} {'hardware':<8} {'band':>6} {'at':>4} {'p50':>7} {'p95':>7} "
        f"{'p99':>7} {'ttft p95':>9} {'tok/s':>7} {'hit':>5} {'calls':>6} {'failed':>6}"
    )
    lines = [header, "-" * len(header)]
    for entry in baseline.backends:
        for band in BANDS:
            f = entry.bands.get(band.name)
            if f is None:
                continue
            lines.append(
                f"{entry.name:<16} {entry.hardware:<8} {band.name:>6} {f.concurrency:>4} "
                f"{f.latency_p50_s:>6.2f}s {f.latency_p95_s:>6.2f}s {f.latency_p99_s:>6.2f}s "
                f"{_seconds(f.ttft_p95_s):>9} {_number(f.output_tokens_per_s):>7} "
                f"{_percent(f.cache_hit_rate):>5} {f.samples:>6} {f.failures:>6}"
            )
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


class _Bar:
    """A rich progress bar on stderr (none when rich is missing)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        self._progress = RichProgress(transient=True, console=Console(stderr=True))
        self._task = self._progress.add_task("profiling", total=total)
        self._progress.start()

    def advance(self, backend: str, level: int, done: int, total: int) -> None:
        self._progress.update(
            self._task, advance=1, description=f"profiling {backend} at {level}"
        )

    def stop(self) -> None:
        self._progress.stop()


def _progress(total: int) -> _Bar | None:
    """A bar on a terminal only: piped, stderr keeps to the one-line errors."""
    if not sys.stderr.isatty():
        return None
    try:
        return _Bar(total)
    except ImportError:
        return None
