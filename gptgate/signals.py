"""``Backend(signals=True)``: read a self-hosted server's own load into the limit and router.

A background reader per backend fetches ``/metrics`` (vLLM, SGLang, llama.cpp with
``--metrics``) and, for llama.cpp, ``/slots`` and ``/props`` every ``signals_interval_s``,
each read bounded in time. A failed read (500, timeout, garbage) changes nothing for the
calls: the snapshot ages, goes stale after three intervals, and one log line says so.

While the snapshot is fresh:

- the limit (``concurrency="auto"``) is capped by :class:`SignalLimit`: a waiting queue at the
  server is the knee's evidence (more in flight would only wait there), so the cap is what we
  had in flight less what waits, then grows by one per quiet read; the slot count is a
  ceiling. In slow start the limit doubles per read that shows a full limit running and
  nothing waiting; after it, what the server ran without a queue is a floor. Neither
  raises the limit past the controller's own ceiling (a rate limit's, the timeout's).
  Stale or absent signals, or reads of one server of several behind a balancer (they
  count a part of our calls), or reads not yet shown to count our calls: the
  latency-only controller alone, as before.
- the router adds :func:`server_wait_s`: the work waiting per slot times the service time, and
  a little for a fuller KV cache — a warm prefix (worth half a service time) beats a short
  queue, not a long one.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx2
from opentelemetry import metrics

from .clock import Clock
from .config import Backend
from .limits import FixedLimit
from .limits.base import Sample
from .signals_auto import AutoSignals, parser_ready
from .signals_parse import ServerLoad, combine, merge_props, parse_metrics, parse_slots

if TYPE_CHECKING:
    from .limits import Limit
    from .routing import BackendState
    from .shared.fleet import FleetClient
    from .signals_fleet import SignalShare

__all__ = ["ServerSignals", "SignalGauges", "SignalLimit", "SignalReader", "server_wait_s"]

log = logging.getLogger("gptgate")

#: a snapshot older than this many intervals is stale: the limit and router ignore it
STALE_INTERVALS = 3.0
#: the most one read may take, whatever the interval (a hung /metrics must not pile up)
MAX_READ_S = 5.0
#: KV cache this full preempts or queues new sequences: evidence like a waiting queue
KV_FULL = 0.98
#: a read that counts fewer than this share of our calls in flight (running + waiting) missed
#: them: a stall before the scheduler, a call in transit — or another server's
ACCOUNTED = 0.75
#: our calls a read may miss as in transit before it counts as missing them
IN_TRANSIT = 1
#: the last reads judged for a partial view: half of them missing our calls is a balancer
PARTIAL_READS = 8
#: a first read with a slot count and nothing in flight is read again this many times an
#: interval (at most this many times) until a read finds calls in flight
QUICK_READS = 8


@dataclass(frozen=True, slots=True)
class ServerSignals:
    """``gate.stats()[name].server``: the server's own view of its load at the last good
    read. Every field is ``None`` when signals are off, never read, or not reported."""

    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    slots_total: int | None = None
    slots_busy: int | None = None
    #: seconds since the last good read
    age_s: float | None = None


def _root(base_url: str) -> str:
    """The server's root: ``/metrics`` lives beside ``/v1``, not under it."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class SignalReader:
    """Reads one backend's signals in the background; the latest good read and the cap it
    implies for the limit."""

    def __init__(
        self, backend: Backend, clock: Clock, in_flight: Callable[[], int] = lambda: 0
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.interval_s = backend.signals_interval_s
        self._in_flight = in_flight
        self.load: ServerLoad | None = None
        self.read_at: float | None = None
        #: the concurrency past which the server queued (None: no queue seen yet)
        self.knee: int | None = None
        self._others = 0  # what other clients ran at the last read (floor)
        self.reads = 0
        self.failures = 0
        self._failing = False
        self._llamacpp = backend.provider == "llamacpp"
        #: ``shared=``: the fleet's lease on reading this server (gptgate/signals_fleet.py)
        self.share: SignalShare | None = None
        #: per recent read with calls in flight: did it miss most of them (see ``partial``)
        self._missed: deque[bool] = deque(maxlen=PARTIAL_READS)
        self.partial = False
        #: the last read may be acted on: see :meth:`_judge_view`
        self._usable = False
        self._warned_partial = False
        self._quick = 0  # quick reads made (``QUICK_READS``); -1: no more
        #: called with each good read of the whole server and our calls in flight then
        self.listeners: list[Callable[[ServerLoad, int], None]] = []
        #: ``signals=None`` before its first good read: quiet failures, and a stop when the
        #: server does not serve its load (gptgate/signals_auto.py); None: ``signals=True``
        self.auto: AutoSignals | None = None
        #: called when the reader stops for good (an ``auto`` reader's server serves no load)
        self.on_stop: list[Callable[[], None]] = []

    # ---- what the limit and router see ---------------------------------------------------
    def fresh(self, now: float | None = None) -> ServerLoad | None:
        """The last read, or None when it is older than three intervals (or absent), or
        when the reads are of a part of the server (:attr:`partial`) or not yet shown whole."""
        if self.load is None or self.read_at is None or not self._usable:
            return None
        now = self.clock.now() if now is None else now
        if now - self.read_at > STALE_INTERVALS * self.interval_s:
            return None
        return self.load

    def cap(self) -> int | None:
        """The most calls in flight the server's signals allow now; None: no opinion."""
        load = self.fresh()
        if load is None:
            return None
        caps = [c for c in (self.knee, load.slots_total) if c is not None]
        return min(caps) if caps else None

    def floor(self) -> int | None:
        """The slots the server says are ours to fill now: its slot count less what other
        clients run, while it queues nothing and its KV cache has room; None: no opinion.

        The latency controller reads a rise in latency as queueing. On a server that reports
        free slots and no queue the rise is batching, not queueing (llama-server, 8 slots:
        latency-only settled at 2–5 in flight; issue 35), so the slots are the target."""
        load = self.fresh()
        if load is None or load.slots_total is None:
            return None
        if (load.waiting or 0) > 0 or (load.kv_usage or 0.0) >= KV_FULL:
            return None
        free = load.slots_total - self._others
        return free if free > 0 else None

    def snapshot(self) -> ServerSignals:
        load = self.load
        if load is None or self.read_at is None:
            return ServerSignals()
        return ServerSignals(
            running=load.running,
            waiting=load.waiting,
            kv_usage=load.kv_usage,
            slots_total=load.slots_total,
            slots_busy=load.slots_busy,
            age_s=max(0.0, self.clock.now() - self.read_at),
        )

    # ---- reading -------------------------------------------------------------------------
    def observe(self, load: ServerLoad, age_s: float = 0.0) -> None:
        """A good read (``age_s`` old: the fleet's reader's): remember it, move the knee."""
        self.auto = None  # served: from here on as signals=True
        in_flight = self._in_flight()
        self._judge_view(load, in_flight)
        self.load = load
        self.read_at = self.clock.now() - age_s
        self.reads += 1
        if self._failing:
            log.info("gptgate: backend %r: server signals readable again", self.backend.name)
        self._failing = False
        if self._usable:
            self._move_knee(load, in_flight)
            for listener in self.listeners:
                listener(load, in_flight)

    def _judge_view(self, load: ServerLoad, in_flight: int) -> None:
        """Whether the reads show the server our calls go to, or a part of it; and whether
        this read may be acted on.

        Several servers behind one URL (llama-servers behind a balancer, vLLM pods behind a
        Service) answer each read from one of them: its slots are not the server's (a
        ceiling there halved family draw 34's goodput, 2 × 2 slots) nor its queue. Such a
        read counts a fraction of our calls in flight; a whole server counts them all but
        the few stalled before its scheduler or in transit. Half of the last reads missing
        a quarter of our calls: the view is partial, and the limit and router ignore it.

        Until that verdict has reads to go by, a read is acted on only if it counts our
        calls itself: a whole server's first read with calls in flight does, one replica's
        does not. Acted on, one replica's first reads capped the limit at its slots and
        ended slow start at its queue, and what they set outlived the verdict (family
        draws 60 and 1048, 5 × 8 and 12 × 5 llama-servers: a third of plain ``auto``'s
        goodput). A read with nothing in flight proves nothing either way: the first read,
        before any call, is not acted on (draw 60's set the floor and ceiling at one
        replica's 8 slots)."""
        if in_flight <= 0:  # keeps the standing of the reads before it
            self._usable = self._usable or (
                not self.partial and len(self._missed) >= PARTIAL_READS // 2
            )
            return
        accounted = (load.running or load.slots_busy or 0) + (load.waiting or 0)
        # one call not counted is in transit (sent, or answered and not yet back), not a
        # balancer: on a 2-slot llama-server of 60-ms calls, (1 running) of our 2 was read
        # often enough to warn "several servers behind one URL?" on the one server
        missed = accounted < ACCOUNTED * in_flight and in_flight - accounted > IN_TRANSIT
        self._missed.append(missed)
        judged = len(self._missed) >= PARTIAL_READS // 2
        partial = judged and 2 * sum(self._missed) >= len(self._missed)
        if partial and not self._warned_partial:
            self._warned_partial = True  # once: a view that flaps must not flood the log
            log.warning(
                "gptgate: backend %r: the server's reports count %d of the %d calls in flight "
                "to it, on most reads: several servers behind one URL? Their signals are "
                "ignored while so; give each server its own Backend to read them",
                self.backend.name, accounted, in_flight,
            )
        self.partial = partial
        self._usable = not partial and (judged or not missed)

    def _move_knee(self, load: ServerLoad, in_flight: int) -> None:
        waiting = load.waiting or 0
        # other clients' calls, counted when the server counted (not against a later
        # in-flight count: calls ending since the read would pass for someone else's)
        self._others = max(0, (load.running or load.slots_busy or 0) - in_flight)
        if waiting > 0 or (load.kv_usage or 0.0) >= KV_FULL:
            # our share of what runs: all of it when we are the server's only client
            running = load.running
            if running is not None and running + waiting > 0:
                self.knee = max(1, math.floor(in_flight * running / (running + waiting)))
            else:
                self.knee = max(1, in_flight - waiting)
        elif self.knee is not None and in_flight >= self.knee:
            self.knee += 1  # quiet at the cap: room for one more

    async def read_once(self, client: httpx2.AsyncClient) -> ServerLoad:
        load = ServerLoad()
        metrics_error: Exception | None = None
        try:
            response = await client.get("/metrics")
            response.raise_for_status()
            load = parse_metrics(response.text)
        except Exception as error:  # llama.cpp without --metrics: /slots may still answer
            if not self._llamacpp:
                raise
            metrics_error = error
        if self._llamacpp:
            try:
                slots = await client.get("/slots")
                slots.raise_for_status()
                load = combine(parse_slots(slots.content), load)
            except Exception:
                props = await client.get("/props")
                props.raise_for_status()
                load = merge_props(load, props.content)
        if load.empty:
            raise metrics_error or ValueError("no load metric this gateway knows")
        return load

    async def run(self) -> None:
        """Read every interval until cancelled (the gateway's close)."""
        timeout = min(MAX_READ_S, max(0.05, self.clock.to_real(self.interval_s)))
        headers = dict(self.backend.headers)
        # the key the calls send, from api_key_env too: llama-server's --api-key guards
        # /slots, /props and /metrics as it does /v1 (a read without it is a 401)
        key = self.backend.resolve_api_key()
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        async with httpx2.AsyncClient(
            base_url=_root(self.backend.base_url),
            transport=self.backend.transport,
            timeout=timeout,
            headers=headers,
        ) as client:
            while True:
                await self._one_turn(client, timeout)
                if self.auto is not None and self.auto.stopped:
                    break
                await self.clock.sleep(self._pause_s())
        for stop in self.on_stop:
            stop()

    def _pause_s(self) -> float:
        """The time to the next read: an interval, but an eighth of one while the reads
        have a slot count (a floor and a ceiling to set) and found no calls in flight yet.
        The read at the open finds none and is not acted on (one replica's reads the same);
        on a whole server the next read proves the view, and waiting a whole interval for
        it cost family draw 92 (one llama-server of 23 slots, 0.5-s calls) 7 points of
        goodput. The reads then keep their phase (every interval from the first)."""
        step = self.interval_s / QUICK_READS
        if self._quick < 0:
            return self.interval_s
        load = self.load
        if not self._missed and self._quick < QUICK_READS - 1 and (
            load is not None and load.slots_total is not None
        ):
            self._quick += 1
            return step
        made, self._quick = self._quick, -1
        return self.interval_s - made * step

    async def _one_turn(self, client: httpx2.AsyncClient, timeout: float) -> None:
        if self.share is not None:
            role, published = await self.share.turn()
            if role == "follow":  # another process of the fleet reads this server
                if published is not None:
                    self.observe(*published)
                return
        try:
            with anyio.fail_after(timeout):
                load = await self.read_once(client)
        except Exception as error:
            self._failed(error)
            return
        self.observe(load)
        if self.share is not None:
            await self.share.publish(load)

    def _failed(self, error: Exception) -> None:
        self.failures += 1
        if self.auto is not None:  # never read: not served, or not yet; no warning
            self.auto.failed(error)
            return
        if not self._failing:
            # one line per outage, never the key: the URL and the error's type and text
            log.warning(
                "gptgate: backend %r: server signals unreadable (%s: %s); the limit and "
                "router use latency alone until they come back",
                self.backend.name, type(error).__name__, str(error)[:200],
            )
        self._failing = True


class SignalLimit:
    """An adaptive limit capped by the server's signals (anything else goes to ``inner``).

    A wrapper, not a change to the controller: the latency-based limit keeps learning; while
    the signals are fresh its value is held at or below :meth:`SignalReader.cap`, and raised
    to :meth:`SignalReader.floor` (the server's free slots) while the server queues nothing.

    While the controller is in slow start it is also raised to a **ramp** that doubles per
    quiet read: a read at which every call of a full limit runs and none waits (KV cache not
    full) is the evidence slow start's window waits a latency or more for — that the level
    did not queue — every interval instead. The first read with a queue stops it (the knee
    caps it from there); the controller's own exit from slow start ends it too."""

    def __init__(self, inner: Limit, reader: SignalReader) -> None:
        self.inner = inner
        self.reader = reader
        self._ramp: int | None = None
        #: the most calls in flight a read showed all running, none waiting (slow start's)
        self._quiet = 0
        reader.listeners.append(self._on_read)

    def _on_read(self, load: ServerLoad, in_flight: int) -> None:
        if not getattr(self.inner, "in_slow_start", False) or self.reader.knee is not None:
            return
        if (load.waiting or 0) > 0 or (load.kv_usage or 0.0) >= KV_FULL:
            return
        level = max(self.inner.limit, self._ramp or 0)
        if in_flight >= level:  # the whole level admitted, and nothing waits
            self._quiet = max(self._quiet, in_flight)
            self._ramp = min(2 * level, int(getattr(self.inner, "max_limit", 2 * level)))

    @property
    def limit(self) -> int:
        own = self.inner.limit
        raised = 0  # what the server's reads say we may run
        if self.reader.fresh() is not None:
            if getattr(self.inner, "in_slow_start", False):
                raised = self._ramp or 0
            else:  # what the server ran without a queue stays ours: its knee, once it queued
                raised = max(self._quiet, self.reader.knee or 0)
        floor = self.reader.floor()
        if floor is not None:  # free slots and no queue: fill them
            raised = max(raised, floor)
        # never past the controller's own ceiling (max_concurrency, a rate limit's, the
        # timeout's): a server with room says nothing of an RPM/TPM budget, and calls
        # past that ceiling only hold a permit while they wait for the pacer (family
        # draw 72: a knee of 64 kept as a floor where the rate allowed ~20, p99 4.7 → 23.7 s)
        high = int(getattr(self.inner, "ceiling", getattr(self.inner, "max_limit", raised)))
        own = max(own, min(raised, high))
        cap = self.reader.cap()
        if cap is None:
            return own
        low = int(getattr(self.inner, "min_limit", 1))
        return max(low, min(own, cap))

    def update(self, sample: Sample, now: float) -> None:
        self.inner.update(sample, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"SignalLimit({self.inner!r}, cap={self.reader.cap()})"


def server_wait_s(reader: SignalReader | None, service_s: float) -> float:
    """The router's term: predicted seconds of waiting at the server per the signals
    (waiting per slot × service time), plus a quarter service time at a full KV cache."""
    load = reader.fresh() if reader is not None else None
    if load is None:
        return 0.0
    slots = load.slots_total or max(load.running or 0, 1)
    wait = (load.waiting or 0) / slots * service_s
    kv = 0.25 * (load.kv_usage or 0.0) * service_s
    return wait + kv if math.isfinite(wait + kv) else 0.0


class SignalGauges:
    """Starts a reader per backend with signals on (``signals=True``, or ``None`` on a preset
    that reports its load: ``Backend.signals_mode``) at each open, and publishes what they
    read as OTel gauges (``gptgate.server.requests.running`` / ``.waiting``,
    ``gptgate.server.kv_cache.usage``, ``gptgate.server.slots``), per backend."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        self.readers: dict[str, SignalReader] = {}
        self._meter_provider = meter_provider
        self._made = False

    def start(
        self,
        states: Iterable[BackendState],
        clock: Clock,
        task_group: anyio.abc.TaskGroup,
        fleet: FleetClient | None = None,
    ) -> None:
        self.readers = {}
        chosen = [s for s in states if s.backend.signals_mode != "off"]
        if any(s.backend.signals_mode == "on" for s in chosen):
            parser_ready("on", [])  # raises ImportError without the extra
        auto = [s.name for s in chosen if s.backend.signals_mode == "auto"]
        if auto and not parser_ready("auto", auto):  # one INFO line, no reader
            chosen = [s for s in chosen if s.backend.signals_mode == "on"]
        for state in chosen:
            limiter = state.limiter
            reader = SignalReader(state.backend, clock, functools.partial(_in_flight, state))
            if state.backend.signals_mode == "auto":
                reader.auto = AutoSignals(state.name, functools.partial(_answered, state))
                reader.on_stop.append(functools.partial(self._detach, state, reader))
            state.signals = reader
            if fleet is not None:
                from .signals_fleet import SignalShare

                backend = state.backend
                reader.share = SignalShare(fleet, fleet.key_of(backend), reader.interval_s)
            if not isinstance(limiter.limit, FixedLimit):
                limiter.limit = SignalLimit(limiter.limit, reader)
            self.readers[state.name] = reader
            task_group.start_soon(reader.run)
        if self.readers and not self._made:
            self._made = True
            self._gauges()

    def _detach(self, state: BackendState, reader: SignalReader) -> None:
        """An ``auto`` reader stopped (its server serves no load): the backend as with
        ``signals=False`` — no reader for the router, its own limit unwrapped."""
        if state.signals is reader:
            state.signals = None
        limit = state.limiter.limit
        if isinstance(limit, SignalLimit) and limit.reader is reader:
            state.limiter.limit = limit.inner
        if self.readers.get(state.name) is reader:
            del self.readers[state.name]

    def _gauges(self) -> None:
        meter = metrics.get_meter("gptgate", meter_provider=self._meter_provider)
        for name, field_name, unit in (
            ("gptgate.server.requests.running", "running", "{request}"),
            ("gptgate.server.requests.waiting", "waiting", "{request}"),
            ("gptgate.server.kv_cache.usage", "kv_usage", "1"),
            ("gptgate.server.slots", "slots_total", "{slot}"),
        ):
            meter.create_observable_gauge(
                name, callbacks=[self._observer(field_name)], unit=unit,
                description=f"The server's own {field_name.replace('_', ' ')} (fresh reads only)",
            )

    def _observer(
        self, field_name: str
    ) -> Callable[[metrics.CallbackOptions], Iterable[metrics.Observation]]:
        def observe(options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            for backend, reader in self.readers.items():
                load = reader.fresh()
                value = getattr(load, field_name) if load is not None else None
                if value is not None:
                    yield metrics.Observation(value, {"gptgate.backend": backend})

        return observe


def _in_flight(state: BackendState) -> int:
    """Our calls at the server: the permits held, less those waiting for the pacer."""
    return max(0, state.limiter.in_flight - state.pacing)


def _answered(state: BackendState) -> bool:
    """Has the server answered a call of ours (its failed reads then mean "not served")?"""
    return state.latency.count > 0
