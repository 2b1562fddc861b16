"""Fleet-wide admission through Redis: leased permits, the shared 429 pause, and the fallback
to local limits when Redis misbehaves.

One :class:`FleetClient` per gateway holds the connection, renews this process's leases and
sends its releases from one background task; one :class:`FleetAdmission` per backend with a
fixed limit is the shared layer of that backend's :class:`~gptgate.limits.Limiter` (the
limiter admits locally first, then asks here). The hot path costs one Redis round trip to
acquire (one Lua script, which also carries this process's releases queued for the backend)
and at most one to release (sent by the background task, pipelined with other releases, when
no acquire carried it first), never more. And the round trips are shared: every operation of
the client goes through one queue and one connection (gptgate/shared/coalesce.py), so calls
that acquire at once travel in one pipeline.

Leases expire on Redis's clock (each script reads ``TIME``; ``fleet_clock`` replaces it in
tests): a process that dies has its permits back within ``lease_s``, while a live one renews
its leases every ``lease_s / 3``. No process's own clock judges a lease, so one whose clock
runs ahead sweeps nobody's live permits. Redis down or slower than ``op_budget_s`` is an *outage*:
one warning, and admission goes on locally — this process's share of the limit, ``limit ÷``
the live workers last seen (at least 1) — until a probe finds Redis again, when the permits
held meanwhile are registered (re-added, so none is counted twice or not at all). For two
probe periods after that rejoin the process still keeps to its share: the other processes
rejoin at their own next probe and until then admit on their shares, which Redis cannot
count — a process that took the whole limit back at once put the fleet above it.

An outage before the fleet was ever *seen* (Redis unreachable since the start: down, or a
mistyped URL) has no live-worker count to divide by: the share is 1, since any number of
processes may be admitting alone (taking the whole limit, 3 workers put 18 calls on a limit of
6). It grows only with evidence: once a renewal has counted the live workers after the others
had their two probe periods to rejoin. Meanwhile admission goes through Redis as usual (the
fleet's limit) once the rejoin is over; only an outage's share waits for that count.
``Shared(required=True)`` fails the start instead.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc

from ..clock import Clock
from ..errors import OverloadedError, SharedUnreachableError
from . import scripts
from .coalesce import Coalescer, Command, SenderStopped
from .config import Shared
from .health import HEALTH_POLL_S, FleetHealth
from .loop_budget import BUSY_OUTAGE_S, LoopBusy, op_budget
from .names import BackendNames
from .needs_asyncio import require_asyncio
from .scope import fleet_scope
from .wake import FleetWake, waiters_key

if TYPE_CHECKING:
    from ..config import Backend
    from ..limits.base import Limit
    from ..routing import CircuitBreaker
    from .auto import FleetAutoAdmission
    from .pacing import PendingTake

__all__ = ["FleetAdmission", "FleetClient", "FleetStatistics", "Lease"]

log = logging.getLogger("gptgate")

State = Literal["unknown", "up", "down"]

#: every script a client may run: all loaded when it starts, so no call pays a load
SCRIPTS = tuple(name for name in scripts.__all__ if name != "SAMPLE_BATCHES")

#: a permit whose release is still queued is kept for this process's next call on the backend
#: (no release, no acquire) while Redis answered this backend this recently (real seconds):
#: a pause or a lower limit set by another process is then heard at most this much later.
#: Kept fresh by a read sent with the releases every half of it. Not shorter: an event loop
#: saturated by 32 callers takes ~16 ms to come round to the background task, and at 20 ms
#: half the calls found it stale and asked Redis all at once
REUSE_FRESH_S = 0.1
#: how long a release waits for an acquire on the same backend to carry it (real seconds):
#: under load most releases then cost no round trip of their own; a permit reaches the other
#: processes at most this much later, nothing next to a model call's latency
RELEASE_LINGER_S = 0.002


#: how much longer a waiting call polls while wake-ups can reach it (``FleetClient.poll_s`` ×):
#: a backstop for a message lost or a waiter woken that had left, not the way permits move
WAKE_BACKSTOP = 10.0


class _RedisDown(Exception):
    """An operation failed or outlived its budget: the client is now in an outage — or,
    when the event loop was too busy to hear the answer (``state`` still "up"), the
    operation's outcome is unknown and it is asked again."""


class _Lost(Exception):
    """Redis no longer marks this process live on the backend: it lost the fleet's state
    (restarted empty, flushed) while this process's connection reconnected without an error.
    The acquire did nothing; the process registers its permits again and asks once more."""


class Lease:
    """One fleet permit held by this process. ``registered``: it may be counted in Redis, so
    its release must be sent there (a permit granted locally during an outage is not, until
    a renewal after the rejoin registers it)."""

    __slots__ = ("cap", "counted", "granted_at", "granted_wall", "id", "registered")

    def __init__(self, lease_id: str) -> None:
        self.id = lease_id
        self.registered = False
        #: leases the fleet counted at the grant, this one included (None: granted locally,
        #: during an outage); when, on the gateway's clock and on the fleet's (Redis's)
        self.counted: int | None = None
        self.granted_at = 0.0
        self.granted_wall = 0.0
        #: the fleet's cap the acquire applied (0: granted locally, or reused)
        self.cap = 0

    def __repr__(self) -> str:
        return f"Lease({self.id!r}, registered={self.registered})"


@dataclass(frozen=True, slots=True)
class FleetStatistics:
    #: the fleet-wide limit (the lowest fixed concurrency any process configured)
    limit: int
    #: leases counted fleet-wide at this process's last acquire (None before one)
    fleet_in_flight: int | None
    #: leases this process holds
    held: int
    #: calls of this process waiting for a fleet permit
    waiting: int
    #: "up", "down" (local limits) or "unknown" (not started)
    state: State
    #: this process's share of the limit during an outage (1 before the fleet was seen)
    local_share: int
    live_workers: int
    outages: int
    #: operations that outlived their budget while this process's event loop was busy
    #: (asked again, not an outage: docs/guide/many-processes.md)
    loop_busy: int = 0
    #: operations Redis answered later than the budget, asked again before any outage
    slow_ops: int = 0
    #: calls admitted on a permit this process's last call ended, its release not yet sent
    #: (no round trip: the fleet still counted it)
    reused: int = 0
    #: ``concurrency="auto"``: whether this process leads (computes the fleet's limit);
    #: None for a fixed limit
    leader: bool | None = None
    #: whether this process has seen the fleet (a renewal counted its live workers, the
    #: others rejoined); before, an outage admits one call at a time
    seen: bool = False
    #: the most permits this process may hold now: ``limit`` while Redis answers,
    #: ``local_share`` during an outage or a rejoin (1 before the fleet was seen)
    in_force: int = 0
    #: times Redis was found to have lost the fleet's state (restarted empty, flushed) with
    #: no outage seen: the permits were registered again (docs/guide/many-processes.md)
    losses: int = 0


class FleetClient:
    """The connection to the fleet's Redis, the outage state, and the background task that
    renews leases, sends releases and probes Redis during an outage."""

    def __init__(
        self,
        shared: Shared,
        *,
        clock: Clock,
        wall: Callable[[], float] = time.time,
        fleet_clock: Callable[[], float] | None = None,
        poll_s: float = 0.005,
        probe_s: float | None = None,
        lead_s: float | None = None,
    ) -> None:
        self.shared = shared
        self.clock = clock
        #: this process's wall clock: it judges no lease (Redis's clock does), only the
        #: skew warning reads it (``_skew``)
        self.wall = wall
        #: the clock the scripts judge leases, leads and budgets by (seconds): None is
        #: Redis's own (``TIME``). Only tests pass one, to move time by hand
        self.fleet_clock = fleet_clock
        #: Redis's clock at the last renewal (seconds) and when (monotonic): ``fleet_time``
        self._redis_at: tuple[float, float] | None = None
        #: how often the one waiting call of a backend asks Redis again (real seconds) — while
        #: no wake-up can reach it; with the subscriber listening, a release elsewhere wakes
        #: it at once and the poll is a backstop, ``WAKE_BACKSTOP`` × as long
        self.poll_s = poll_s
        #: how often Redis is probed during an outage (real seconds)
        self.probe_s = probe_s if probe_s is not None else min(1.0, shared.lease_s / 3)
        #: how often a leader of ``concurrency="auto"`` backends runs its round — drains the
        #: fleet's samples, publishes its limit, renews its lead (real seconds): its lag is
        #: the fleet's reaction time, next to one process's own limit that reacts at once
        self.lead_s = lead_s if lead_s is not None else min(0.02, shared.lease_s / 4)
        #: how often a follower runs its round (is the leader alive? the published limit);
        #: a leader's lead lasts ``lease_s`` × 3/4, so a dead one is replaced within lease_s
        self.follow_s = max(self.lead_s, shared.lease_s / 4)
        #: leadership rounds run (background operations, off every call's path)
        self.lead_rounds = 0
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count()
        self.state: State = "unknown"
        #: live workers of the fleet at the last renewal (1 before one: alone until told)
        self.live_workers = 1
        self.outages = 0
        #: operations that outlived their budget while the event loop was busy (not outages)
        self.loop_busy = 0
        #: when the operations began to lag with none answered since (``loop_budget``)
        self.busy_since: float | None = None
        #: operations that outlived their budget and were asked again (not outages)
        self.slow_ops = 0
        #: when the operations began to time out with none answered since
        self.slow_since: float | None = None
        #: until when (monotonic) a rejoined process keeps to its share (``rejoining``)
        self._rejoined_until = 0.0
        #: a renewal has marked this worker live: from then on, finding it gone means Redis
        #: lost the fleet's state (``scripts._LOST``)
        self._marked = False
        #: times Redis was found to have lost the fleet's state with no outage declared
        self.losses = 0
        #: this process's wall clock minus Redis's, at the last renewal (seconds)
        self.clock_skew_s = 0.0
        self._skew_warned = False
        self._relearning = anyio.Lock()
        #: a renewal has counted the fleet's live workers with every process rejoined
        self._seen = False
        #: why the connect failed, for the outage ``start`` declares
        self._unreached: BaseException | None = None
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}
        #: every operation goes through it: one connection, one pipelined round trip at a time
        self._batch = Coalescer(self)
        self._errors: tuple[type[BaseException], ...] = (OSError, TimeoutError)
        self._admissions: list[FleetAdmission] = []
        self._autos: list[FleetAutoAdmission] = []
        self._healths: list[FleetHealth] = []
        #: (permits key, lease id) releases not yet sent
        self._pending: list[tuple[str, str]] = []
        self._kick = anyio.Event()
        #: a release to send without lingering: another process waits for a permit of its
        #: backend (its waiting head is woken when the release reaches Redis)
        self._hurry = False
        #: releases handed on to another process: sent on their own, never carried back
        self._yielded: set[str] = set()
        self._prefix = f"gptgate:{shared.namespace}"
        #: each backend's name → its base_url and model, told to the fleet (config drift)
        self.names = BackendNames(self._prefix)
        #: the subscriber that wakes this process's waiting calls on another's release
        self.wake = FleetWake(self)

    # -- lifecycle ------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection and load every script — before the first call, so no call
        pays a connect or a script load inside its budget (and within the backstop, not one
        operation's budget: no call waits on it). ``Shared(required=True)``: a Redis that
        cannot be reached raises :class:`~gptgate.errors.SharedUnreachableError`, naming
        it; else :meth:`start` declares the outage. Under trio a GateError: redis-py's client
        is asyncio's (gptgate/shared/needs_asyncio.py)."""
        require_asyncio("shared= (the fleet's Redis)")
        from redis.asyncio import BlockingConnectionPool, Redis  # only with shared=: optional
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        # a backstop only: each operation's budget is op_budget's, which tells a slow Redis
        # from a busy event loop (redis-py's own timeout on the socket cannot)
        backstop = max(1.0, 10 * self.shared.op_budget_s)
        self._errors = (RedisError, OSError, TimeoutError)
        # one sender at a time (gptgate/shared/coalesce.py): one connection in use, a second
        # only for what runs beside it (a close while a batch hangs), so no call ever waits
        pool = BlockingConnectionPool.from_url(
            self.shared.url,
            max_connections=2,
            timeout=backstop,
            socket_timeout=backstop,
            socket_connect_timeout=backstop,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._redis = Redis.from_pool(pool)
        for name in SCRIPTS:
            self._scripts[name] = self._redis.register_script(getattr(scripts, name))
        try:
            with op_budget(backstop):
                await self._batch.load()  # opens the connection too
        except self._errors as error:
            if self.shared.required:
                await self.aclose()
                raise SharedUnreachableError(
                    f"shared state {self.shared.display_url} unreachable at start "
                    f"({self._why(error)}); Shared(required=True) does not start without it",
                    url=self.shared.display_url,
                ) from None
            self._unreached = error

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Register this worker and start the background tasks (connecting first, unless
        :meth:`connect` did). A Redis that cannot be reached is an outage (local limits, a
        warning) — unless ``Shared(required=True)``: then the connect raised."""
        if self._redis is None:
            await self.connect()
        if self._unreached is not None:
            self._down(self._unreached)
            self._unreached = None
        task_group.start_soon(self._batch.serve)
        await self._renew()  # (publishes this process's fixed limits too)
        if self._autos and self.state == "up":
            await self._lead()  # a leader from the first call on
        if self.state == "up":
            await self.wake.subscribe()  # else its task does once Redis answers
        task_group.start_soon(self._run)
        task_group.start_soon(self.wake.run)

    async def aclose(self) -> None:
        """Send what is still pending (within the budget) and close the connection."""
        if self._redis is None:
            return
        await self.wake.aclose()  # no wake-up for it now: a reservation would find no Redis
        if self.state == "up":
            await self._flush()
            # a closed worker is no longer live (the others' outage shares stay right) and no
            # longer waits (no permit is reserved for it)
            with contextlib.suppress(*self._errors), anyio.move_on_after(self.shared.op_budget_s):
                keys = [
                    f"{self._prefix}:workers",
                    *(key for a in self._admissions for key in (a.workers_key, a.waiters_key)),
                ]
                async with self._redis.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.zrem(key, self.worker_id)
                    await pipe.execute()
            for auto in self._autos:  # a leader hands over at once, not after its lease
                if auto.leading:
                    with contextlib.suppress(_RedisDown):
                        await self._op("RESIGN", [auto.leader_key], [self.worker_id])
                    auto.resign()
        redis, self._redis = self._redis, None
        with contextlib.suppress(*self._errors):
            await redis.aclose()
        self.state = "unknown"

    def admission(
        self,
        *,
        name: str,
        base_url: str,
        model: str,
        limit: int,
        on_pause: Callable[[float], None] | None = None,
        scope: str | None = None,
    ) -> FleetAdmission:
        """The shared layer of one backend: keyed by namespace + name (or ``scope``: its
        ``fleet_key``, gptgate/shared/scope.py) + base_url + model, so two fleets (or two
        models behind one URL) never share permits by accident."""
        key = self._backend_key(scope or name, base_url, model)
        admission = FleetAdmission(
            self,
            name=name,
            permits_key=f"{key}:permits",
            pause_key=f"{key}:pause",
            limit_key=f"{key}:limit",
            workers_key=f"{key}:workers",
            limit=limit,
            on_pause=on_pause,
        )
        self._admissions.append(admission)
        self.names.add(name, base_url, model)
        self.wake.add(admission)
        return admission

    def auto_admission(
        self,
        *,
        name: str,
        base_url: str,
        model: str,
        own: Limit,
        factory: Callable[[int], Limit],
        on_pause: Callable[[float], None] | None = None,
        scope: str | None = None,
    ) -> FleetAutoAdmission:
        """The shared layer of one ``concurrency="auto"`` backend: one limit for the fleet,
        computed by a leader from every process's samples (gptgate/shared/auto.py). ``own``
        is this process's limit (the leader's when it leads first), ``factory`` makes a fresh
        one starting at a given limit (when it takes over a state the last leader kept, or
        learns alone during an outage)."""
        from .auto import FleetAutoAdmission

        admission = FleetAutoAdmission(
            self, name=name, key=self._backend_key(scope or name, base_url, model), own=own,
            factory=factory, on_pause=on_pause,
        )
        self._admissions.append(admission)
        self.names.add(name, base_url, model)
        self._autos.append(admission)
        self.wake.add(admission)
        return admission

    def health(
        self, *, name: str, base_url: str, model: str, breaker: CircuitBreaker, probe_s: float,
        scope: str | None = None,
    ) -> FleetHealth:
        """The fleet's circuit of one backend, kept in step with its local ``breaker``."""
        health = FleetHealth(
            self, name=name, key=self._backend_key(scope or name, base_url, model),
            breaker=breaker,
            probe_s=probe_s,
        )
        self._healths.append(health)
        return health

    def _backend_key(self, name: str, base_url: str, model: str) -> str:
        # one hash slot per backend (the braces), so each script's keys sit together
        return f"{self._prefix}:{{{name}|{base_url}|{model}}}"

    def key_of(self, backend: Backend) -> str:
        """A configured backend's fleet key: by its name, or its ``fleet_key`` (scope.py)."""
        return self._backend_key(fleet_scope(backend), backend.base_url, backend.model)

    def kick(self) -> None:
        """Wake the background task: something is queued to send."""
        self._kick.set()

    def clock_s(self, ms: float) -> float:
        """Redis's real milliseconds as seconds of the gateway's clock (which may be scaled)."""
        return max(0.0, ms) / 1000.0 / self.clock.to_real(1.0)

    def new_lease(self) -> Lease:
        return Lease(f"{self.worker_id}:{next(self._ids)}")

    def now_arg(self) -> int | str:
        """The scripts' ``now`` argument: '' (the script reads Redis's clock), or the test's
        ``fleet_clock`` in ms."""
        return "" if self.fleet_clock is None else int(self.fleet_clock() * 1000)

    def fleet_time(self) -> float:
        """The fleet's clock now (seconds), for what is dated with no script to read it (a
        reused permit's grant, the leader's feed, a shared signal read): Redis's clock at the
        last renewal plus the real time since — this process's wall clock before any."""
        if self.fleet_clock is not None:
            return self.fleet_clock()
        if self._redis_at is None:
            return self.wall()
        redis_s, at = self._redis_at
        return redis_s + (time.monotonic() - at)

    def stopwatch(self) -> float:
        """Seconds on a clock that only measures intervals (how long ago a rate report was
        read): real time, or the test's ``fleet_clock``."""
        return self.fleet_clock() if self.fleet_clock is not None else time.monotonic()

    # -- operations -----------------------------------------------------------------------

    async def _op(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """One script's answer, sent with whatever else is queued (one round trip)."""
        return (await self.run([(name, keys, args)]))[0]

    async def run(
        self, commands: list[Command], on_cancel: Callable[[bool], None] | None = None
    ) -> list[Any]:
        """The scripts' answers, in the next pipelined round trip (``Coalescer.run``), within
        the op budget: Redis failing or outliving it is an outage (:class:`_RedisDown`)."""
        if self._redis is None:
            raise _RedisDown()
        try:
            answers = await self._batch.run(commands, on_cancel)
        except SenderStopped as error:  # the gateway is closing: its close sends the rest
            raise _RedisDown() from error
        except self._errors as error:
            self._down(error)
            raise _RedisDown() from error
        self._answered()
        return answers

    async def _publish_limit(self, admission: FleetAdmission) -> None:
        """Tell the fleet this process's limit; another process configuring the same backend
        differently gets a warning naming both values, and the fleet uses the lower."""
        if self.state != "up":
            return
        try:
            before = int(
                await self._op(
                    "LIMIT",
                    [admission.limit_key],
                    [admission.limit, 2 * int(self.shared.lease_s * 1000)],
                )
            )
        except _RedisDown:
            return
        if before > 0:
            admission._saw_fleet_limit(before)

    async def acquire(
        self, admission: FleetAdmission, lease: Lease
    ) -> tuple[bool, int, float, int]:
        """One atomic try: (granted, leases counted, pause seconds left, fleet limit)."""
        lease_ms = int(self.shared.lease_s * 1000)
        carried = self._take_releases(admission.permits_key)
        name, keys, args = admission.acquire_script(self.now_arg(), lease_ms, lease)
        args = [*args, *carried]
        # shared= pacing: the call's RPM/TPM take rides in the same round trip
        take = admission.rider(lease.id) if admission.rider is not None else None

        def cancelled(sent: bool) -> None:
            # a deadline or a task group left mid-acquire: what it carried goes again, and a
            # grant it may have had is released (queued now: it runs after the acquire)
            self._pending[:0] = [(admission.permits_key, lease_id) for lease_id in carried]
            if sent:
                self._pending.append((admission.permits_key, lease.id))
            self._kick.set()

        losses = self.losses
        try:
            if take is not None:
                answer = await take.send_with(name, keys, args, cancelled)
            else:
                (answer,) = await self.run([(name, keys, args)], cancelled)
            granted, held, pause_ms, cap, _, waiting, live, lost, now_ms = answer
        except _RedisDown:
            # sent again after the rejoin (a release may run twice: ZREM is idempotent)
            self._pending[:0] = [(admission.permits_key, lease_id) for lease_id in carried]
            raise
        if int(lost):
            # nothing ran: the releases go again, after this process's permits are counted
            self._pending[:0] = [(admission.permits_key, lease_id) for lease_id in carried]
            await self._relearn(losses)
            raise _Lost()
        admission.marked = True
        pause_s = self.clock_s(int(pause_ms))
        admission.live_workers = max(1, int(live))
        admission.fleet_waiting = int(waiting)
        if granted:
            lease.counted = int(held)
            lease.granted_at = self.clock.now()
            lease.granted_wall = int(now_ms) / 1000.0  # Redis's clock
            lease.cap = int(cap)
        return bool(granted), int(held), pause_s, int(cap)

    def release(self, admission: FleetAdmission, lease: Lease, *, hurry: bool = False) -> None:
        """Queue the release (no await on the caller's path): the next call on the same
        backend reuses the permit or its acquire carries the release, else the background
        task sends it ``RELEASE_LINGER_S`` later (``hurry``: at once, for the fleet's oldest
        waiting process)."""
        if not lease.registered:
            return
        if hurry:
            self._hand_on(admission.permits_key, lease.id)
            return
        self._pending.append((admission.permits_key, lease.id))
        if admission.fleet_waiting and not admission._waiting:
            self._hurry = True  # another process waits: no acquire of ours will carry it
        elif admission.fixed and self.state == "up":
            admission._reusable.append(lease.id)
        self._kick.set()

    def release_reservation(self, admission: FleetAdmission) -> None:
        """Hand back the permit reserved for this process on ``admission`` (it was woken with
        nothing left waiting)."""
        if self._redis is not None:  # (not closed meanwhile)
            self._hand_on(admission.permits_key, f"{self.worker_id}:~")

    def _hand_on(self, permits_key: str, lease_id: str) -> None:
        """Release a permit for another process: sent at once by the background task, never
        carried by an acquire of ours (it would come straight back to us)."""
        if (permits_key, lease_id) not in self._pending:
            self._pending.append((permits_key, lease_id))
        self._yielded.add(lease_id)
        self._hurry = True
        self._kick.set()

    def unqueue_release(self, permits_key: str, lease_id: str) -> bool:
        """Take a queued release back (its permit is reused): whether it was still queued."""
        try:
            self._pending.remove((permits_key, lease_id))
        except ValueError:
            return False
        return True

    def _take_releases(self, permits_key: str) -> list[str]:
        """The queued releases of one backend's permits, taken off the queue — but not the
        permits handed on to another process (``yielded``): carried by this process's acquire,
        they would come straight back to it; the background task sends them on their own."""
        if not self._pending:
            return []
        yielded = self._yielded
        carried = [
            lease_id for key, lease_id in self._pending
            if key == permits_key and lease_id not in yielded
        ]
        if carried:
            self._pending = [
                item for item in self._pending
                if item[0] != permits_key or item[1] in yielded
            ]
            for admission in self._admissions:
                if admission.permits_key == permits_key:
                    admission._reusable.clear()  # sent: no longer this process's to reuse
        return carried

    def pause(self, admission: FleetAdmission, seconds: float) -> None:
        """Publish a retry-after pause (``seconds`` of the gateway's clock) for every process
        (sent by the background task)."""
        if seconds > 0 and self.state == "up":
            admission._pause_to_send = max(admission._pause_to_send, seconds)
            self._kick.set()

    # -- the background task ---------------------------------------------------------------

    async def _run(self) -> None:
        every = self.shared.lease_s / 3
        next_renewal = time.monotonic() + every
        next_health = time.monotonic() + HEALTH_POLL_S
        next_lead = time.monotonic() + self._lead_period()
        while True:
            if self.state == "up":
                due = min(next_renewal, next_health) if self._healths else next_renewal
                if self._autos:
                    due = min(due, next_lead)
                wait = due - time.monotonic()
            else:
                wait = self.probe_s
            with anyio.move_on_after(max(0.0, wait)):
                await self._kick.wait()
            self._kick = anyio.Event()
            hurry, self._hurry = self._hurry, False
            if self.state == "up" and self._pending and not hurry:
                await anyio.sleep(RELEASE_LINGER_S)  # time for an acquire to carry them
            if self.state != "up" or time.monotonic() >= next_renewal:
                await self._renew()
                next_renewal = time.monotonic() + every
            if self.state == "up" and self._autos and time.monotonic() >= next_lead:
                await self._lead()
                next_lead = time.monotonic() + self._lead_period()
            if self.state == "up":
                await self._flush()
            if self.state == "up" and self._healths and time.monotonic() >= next_health:
                await self._poll_health()
                next_health = time.monotonic() + HEALTH_POLL_S

    async def _poll_health(self) -> None:
        """Read every backend's fleet circuit (in one round trip) and apply it."""
        commands: list[Command] = [
            ("HEALTH", [health.circuit_key], []) for health in self._healths
        ]
        try:
            circuits = await self.run(commands)
        except _RedisDown:
            return
        for health, (state, left_ms) in zip(self._healths, circuits, strict=True):
            health.apply(int(state), int(left_ms))

    async def _relearn(self, losses: int) -> None:
        """An acquire found Redis had lost the fleet's state (``losses``: the count when it
        was sent): register this process's permits again, once for all the acquires that
        found it, and keep to the share while the others have not (``_renew``)."""
        async with self._relearning:
            if self.losses == losses:
                await self._renew(lost=True)

    async def _renew(self, *, lost: bool = False, again: int = 2) -> None:
        """Heartbeat this worker and re-add every lease it holds (after an outage or a Redis
        restart this registers them: they are in flight, so they must count). A renewal
        that finds this worker gone though it had been marked live (``lost``: an acquire
        found it so) learns that Redis lost the fleet's state: the other processes' permits
        are counted nowhere until their own next renewal (``lease_s / 3``) or acquire, so
        this process keeps to its share until then (``rejoining``). A probe's renewal that
        finds Redis back goes ``again`` once more while a lease was taken on the share after
        it was built: the fleet is back only once every permit held is counted."""
        # the fleet's workers, then each backend's: a process counts on every backend it
        # has, calling it or not (it may call it during an outage, on its share)
        keys = [f"{self._prefix}:workers", *(a.workers_key for a in self._admissions)]
        keys += self.names.keys()  # (as many, in the same order: one per admission)
        args: list[Any] = []
        lease_ms = int(self.shared.lease_s * 1000)
        args += [
            self.now_arg(), lease_ms, self.worker_id, 2 * lease_ms, len(self._admissions),
            "1" if self._marked else "0", *self.names.members(),
        ]
        keys += [a.permits_key for a in self._admissions]  # each counted (fleet_in_flight)
        first = len(keys) - len(self._admissions) + 1  # (the script's KEYS count from 1)
        for index, admission in enumerate(self._admissions, start=first):
            for lease in admission.held:
                lease.registered = True  # from here on it may be in Redis: release it there
                args += [index, lease.id]
            for lease_id in admission._reusable:  # may be reused before its release is sent
                args += [index, lease_id]
        outages = self.outages
        sent, sent_at = self.wall(), time.monotonic()
        try:
            workers, gone, seconds, micros, others, counted = await self._op(
                "RENEW", keys, args
            )
        except _RedisDown:
            return
        if self.outages != outages:
            # answered before an outage declared while its reply waited to be read: it says
            # nothing of Redis now (taken as "up", the next op failed and warned again)
            return
        if again and self.state != "up" and any(
            not lease.registered for admission in self._admissions for lease in admission.held
        ):
            # taken on the share while this renewal was on its way: it listed them not (back
            # at once, they were counted nowhere until the next renewal, lease_s / 3 later)
            await self._renew(lost=lost or bool(int(gone)), again=again - 1)
            return
        self._up()
        redis_s = int(seconds) + int(micros) / 1e6
        self._redis_at = (redis_s, (sent_at + time.monotonic()) / 2)
        self._skew(sent, self.wall(), redis_s)
        self.names.heard(others)
        self._marked = True
        for admission, count in zip(self._admissions, counted, strict=True):
            admission.marked = True
            admission._fleet_in_flight = int(count)
        if lost or int(gone):
            self._lost()
        self.live_workers = believed_live(int(workers), self.live_workers, self.rejoining)
        self._seen = self._seen or not self.rejoining
        await self._publish_limits()

    async def _publish_limits(self) -> None:
        """Each fixed limit of this process, again (every renewal): the fleet's limit is the
        lowest of the processes still renewing theirs (``scripts.LIMIT``)."""
        fixed = [a for a in self._admissions if a.fixed]
        ttl_ms = 2 * int(self.shared.lease_s * 1000)
        before = await self._send_all(
            [("LIMIT", [a.limit_key], [a.limit, ttl_ms]) for a in fixed]
        ) if fixed else None
        for admission, prev in zip(fixed, before or [], strict=False):
            if int(prev) > 0:
                admission._saw_fleet_limit(int(prev))

    async def _flush(self) -> None:
        """Send the pending releases and pauses, pipelined in one round trip."""
        pending, self._pending = self._pending, []
        self._yielded.clear()
        for admission in self._admissions:
            admission._reusable.clear()
        pauses = [(a, a._pause_to_send) for a in self._admissions if a._pause_to_send > 0]
        breakers = [(h, h.to_send) for h in self._healths if h.to_send is not None]
        left = [h for h in self._healths if h.probe_to_leave]
        batches = {a.permits_key: a for a in self._autos if a.has_samples}
        keys = {key for key, _ in pending}
        # a backend whose calls reuse permits hears the pause and the fleet's limit here
        heard = [a for a in self._admissions if a.fixed and (a.permits_key in keys or a.hearing)]
        if not (pending or pauses or breakers or batches or heard or left):
            return
        for admission, _ in pauses:
            admission._pause_to_send = 0.0
        for health, _ in breakers:
            health.to_send = None
        for health in left:
            health.probe_to_leave = False
        assert self._redis is not None
        # one RELEASE per backend, carrying its samples (``concurrency="auto"``) too
        released: dict[str, list[str]] = {}
        waiters = {a.permits_key: a.waiters_key for a in self._admissions}
        for key, lease_id in pending:
            released.setdefault(key, []).append(lease_id)
        for key in batches:
            released.setdefault(key, [])
        commands: list[Command] = []
        now = self.now_arg()
        for key, lease_ids in released.items():
            auto = batches.get(key)
            if auto is not None:
                commands.append(
                    ("RELEASE", [key, auto.waiters_key, auto.samples_key],
                     [auto.take_samples(), now, *lease_ids])
                )
            else:
                commands.append(("RELEASE", [key, waiters[key]], ["", now, *lease_ids]))
        for admission, seconds in pauses:
            ms = max(1, int(self.clock.to_real(seconds) * 1000))
            commands.append(("PAUSE", [admission.pause_key], [ms]))
        for admission in heard:
            admission._reusing = False
            commands.append(
                ("STATE",
                 [admission.pause_key, admission.limit_key, admission.waiters_key,
                  admission.workers_key], [now])
            )
        for health, (circuit, seconds) in breakers:
            # "closed" is remembered long enough for every process's poll to read it
            real_s = (
                self.clock.to_real(seconds) if circuit == "open"
                else 2 * max(self.shared.lease_s, HEALTH_POLL_S)
            )
            commands.append(
                ("BREAKER", [health.circuit_key, health.probe_key],
                 [circuit, max(1, int(real_s * 1000))])
            )
        commands += [("PROBE_LEFT", [h.probe_key], [h.prober_id]) for h in left]
        answers = await self._send_all(commands)
        if answers is None:
            # sent again after the rejoin; samples are not (a batch Redis may have taken
            # before the error must not count twice: the leader can spare a few)
            self._pending = pending + self._pending
            return
        states = answers[len(released) + len(pauses):][: len(heard)]
        for admission, (pause_ms, fleet, waiting, live) in zip(heard, states, strict=True):
            admission._heard(int(pause_ms), int(fleet), int(waiting), int(live))

    async def _send_all(self, commands: list[Command]) -> list[Any] | None:
        """The scripts' answers (in one round trip, with whatever else is queued); None
        (and an outage) when Redis fails."""
        try:
            return await self.run(commands)
        except _RedisDown:
            return None

    def _lead_period(self) -> float:
        return self.lead_s if any(auto.leading for auto in self._autos) else self.follow_s

    async def _lead(self, *, again: bool = True) -> None:
        """One leadership round for every ``concurrency="auto"`` backend, pipelined: take or
        renew the lead, and as the leader publish the limit and drain the samples; as a
        follower read the published limit (gptgate/shared/auto.py)."""
        lease_ms = int(self.shared.lease_s * 750)
        commands: list[Command] = [
            ("LEAD", *auto.lead_script(self.now_arg(), lease_ms)) for auto in self._autos
        ]
        self.lead_rounds += 1
        replies = await self._send_all(commands)
        if replies is None:
            return
        for auto, reply in zip(self._autos, replies, strict=True):
            auto.led(reply)
        if again and any(auto.unpublished for auto in self._autos):
            # a new limit: publish it now rather than a round later (the leader leaves out
            # calls granted before it reached the fleet: the sooner, the fewer)
            await self._lead(again=False)

    # -- outage ---------------------------------------------------------------------------

    def _answered(self) -> None:
        """Redis answered within the budget: any lag so far was a passing one."""
        self.busy_since = None
        self.slow_since = None

    def _down(self, error: BaseException) -> None:
        if self.state == "down":
            return
        now = time.monotonic()
        if isinstance(error, LoopBusy) and self.state == "up":
            # the loop, not Redis: an outage only if it stays too busy to hear the fleet
            self.loop_busy += 1
            if self.busy_since is None:
                self.busy_since = now
            if now - self.busy_since < BUSY_OUTAGE_S:
                return
        elif isinstance(error, TimeoutError) and self.state == "up":
            # one late answer (a Redis or a box busy for a moment) is asked again; a Redis
            # that stays slower than the budget for another budget is an outage
            self.slow_ops += 1
            if self.slow_since is None:
                self.slow_since = now
            if now - self.slow_since < self.shared.op_budget_s:
                return
        self.busy_since = None
        self.slow_since = None
        self.state = "down"
        for admission in self._admissions:
            admission._reusable.clear()  # their releases are sent at the rejoin
        self.outages += 1
        self._batch.fail_queued(error)
        # the first probe in probe_s, not when the background task's wait for the next
        # renewal ends (lease_s / 3: 10 s with lease_s 30, on the share all the while)
        self._kick.set()
        for auto in self._autos:
            auto.resign()  # its lease lapses: another process may lead meanwhile
        if self.seen:
            log.warning(
                "gptgate: shared state %s unreachable (%s): local limits until it answers (%s)",
                self.shared.display_url,
                self._why(error),
                self._shares(with_workers=True),
            )
            return
        log.warning(
            "gptgate: shared state %s unreachable (%s) before the fleet was seen: one call "
            "at a time per backend until it answers, as this process cannot tell how many "
            "others admit alone (%s); Shared(required=True) fails the start instead",
            self.shared.display_url,
            self._why(error),
            self._shares(with_workers=False),
        )

    def _shares(self, *, with_workers: bool) -> str:
        """Each backend's share of its limit, for the outage warning."""
        if not self._admissions:
            return "no shared backends"
        return ", ".join(
            f"{a.name}={a.local_share} of {a.fleet_limit}"
            + (f" ({a.live_workers} live workers)" if with_workers else "")
            for a in self._admissions
        )

    def _why(self, error: BaseException) -> str:
        """An error as a log line shows it: its type and text, the URL's password masked."""
        text = self.shared.mask(str(error))
        return f"{type(error).__name__}: {text}" if text else type(error).__name__

    @property
    def seen(self) -> bool:
        """Whether this process has seen the fleet: a renewal has counted its live workers,
        not while rejoining (the others, admitting alone, had two probe periods to register).
        Until then an outage's share is 1: the process cannot tell how many others admit
        alone."""
        return self._seen

    @property
    def rejoining(self) -> bool:
        """Whether this process rejoined so lately that others may still be on their shares."""
        return time.monotonic() < self._rejoined_until

    def _skew(self, sent: float, answered: float, redis_s: float) -> None:
        """How far this process's wall clock is from Redis's (the middle of the renewal's
        round trip against Redis's TIME). It judges nothing here: leases, leads and budgets
        are on Redis's clock. But a process of an earlier gptgate on the same namespace (a
        rolling deploy) sweeps leases by its own wall clock, and keeps the fleet's limit only
        while every clock stays within ``lease_s / 3`` of Redis's: a host this far off may
        run one. So one warning beyond that bound, saying so, and another only once the
        clock has come back within half of it."""
        self.clock_skew_s = skew = (sent + answered) / 2 - redis_s
        bound = self.shared.lease_s / 3
        # Redis read its clock somewhere in the round trip: a late answer (a busy loop) is
        # no evidence of skew
        if abs(skew) - abs(answered - sent) / 2 > bound and not self._skew_warned:
            self._skew_warned = True
            log.warning(
                "gptgate: this process's clock is %.1f s %s the clock of shared state %s. "
                "Harmless to this release, which judges the fleet's leases on Redis's clock; "
                "but a process of an earlier release (which judges them on its own) with a "
                "clock more than lease_s / 3 (%.1f s) off passes the fleet's limit: sync the "
                "clocks (NTP) before a rolling deploy from one",
                abs(skew), "ahead of" if skew > 0 else "behind", self.shared.display_url,
                bound,
            )
        elif abs(skew) <= bound / 2:
            self._skew_warned = False

    def _lost(self) -> None:
        """Redis lost the fleet's state and this process has just registered its permits
        again. The others register theirs at their next renewal (every ``lease_s / 3``) or
        acquire, which finds the loss too; until then Redis cannot count them, so this
        process keeps to its share (the rejoin's rule) for that long, and a probe period."""
        self.losses += 1
        log.warning(
            "gptgate: shared state %s lost the fleet's state (restarted empty or flushed): "
            "permits registered again, shares for %.1f s",
            self.shared.display_url,
            self._relearn_s,
        )
        self._rejoined_until = max(self._rejoined_until, time.monotonic() + self._relearn_s)

    @property
    def _relearn_s(self) -> float:
        """How long a process keeps to its share after Redis lost the fleet's state: until
        every other live process has renewed (and so registered its permits) once."""
        return max(2 * self.probe_s, self.shared.lease_s / 3 + self.probe_s)

    def _up(self) -> None:
        if self.state == "down":
            log.warning(
                "gptgate: shared state %s answers %s: fleet limits",
                self.shared.display_url,
                "again" if self.seen else "(first time)",
            )
            # the others find Redis at their own next probe (within probe_s, as this one did)
            self._rejoined_until = time.monotonic() + 2 * self.probe_s
        self.state = "up"
        self._answered()


def believed_live(heard: int, known: int, rejoining: bool) -> int:
    """The live workers to go by when Redis counts ``heard``: a Redis restarted empty counts
    only the workers back so far ("1" to the first one), so while this process rejoins — the
    others may still admit on their shares — a count lower than it knew is not believed (its
    share would be the whole limit)."""
    heard = max(1, heard)
    return known if rejoining and heard < known else heard


class FleetAdmission:
    """One backend's fleet permits. A call that finds the fleet full waits in a local FIFO;
    only its head asks Redis again — at once when this process releases a permit or another
    process's release wakes it (gptgate/shared/wake.py), else every ``poll_s`` — so the waiting
    costs Redis one operation per backend, not one per call."""

    #: a limit every process configures (published with LIMIT, the fleet takes the lowest)
    fixed = True

    def __init__(
        self,
        client: FleetClient,
        *,
        name: str,
        permits_key: str,
        pause_key: str,
        limit_key: str,
        workers_key: str,
        limit: int,
        on_pause: Callable[[float], None] | None,
    ) -> None:
        self.client = client
        self.name = name
        self.permits_key = permits_key
        self.waiters_key = waiters_key(permits_key)
        self.pause_key = pause_key
        self.limit_key = limit_key
        self.workers_key = workers_key
        #: the workers live on this backend, as the last acquire counted them (None before
        #: one: the fleet's count at the last renewal)
        self._live_workers: int | None = None
        self.limit = limit
        #: the fleet's limit: the lowest any of its processes configured for this backend
        self.fleet_limit = limit
        self._warned_limits: set[int] = set()
        self.on_pause = on_pause
        self.held: set[Lease] = set()
        #: ids of permits this process ended whose releases are still queued (newest last)
        self._reusable: list[str] = []
        #: when (monotonic) Redis last answered an acquire on this backend
        self._answered_at = -math.inf
        #: calls admitted on a permit kept from the last call instead of an acquire
        self.reused = 0
        #: calls have reused permits since the fleet's pause and limit were last read
        self._reusing = False
        self._turn = anyio.Lock()
        self._freed = anyio.Event()
        self._waiting = 0
        #: processes the fleet had waiting for this backend at this process's last acquire
        self.fleet_waiting = 0
        self._fleet_in_flight: int | None = None
        self._pause_to_send = 0.0
        #: acquires out at Redis now (a rejoining process counts them against its share)
        self._asking = 0
        #: the calling task's RPM/TPM take to send with an acquire (gptgate/shared/pacing.py)
        self.rider: Callable[[str], PendingTake | None] | None = None
        #: a renewal or an acquire has marked this process live on the backend: an acquire
        #: that finds it gone finds Redis lost the fleet's state (``scripts._LOST``)
        self.marked = False

    @property
    def live_workers(self) -> int:
        """The workers sharing this backend's limit, as last heard (at least 1)."""
        live = self._live_workers if self._live_workers is not None else self.client.live_workers
        return max(1, live)

    @live_workers.setter
    def live_workers(self, count: int) -> None:
        self._live_workers = believed_live(count, self.live_workers, self.client.rejoining)

    @property
    def local_share(self) -> int:
        """This process's part of the limit while Redis is away: the limit ÷ the live
        workers last counted — 1 before the fleet was seen (Redis unreachable since the
        start: any number of processes may be admitting alone)."""
        if not self.client.seen:
            return 1
        return max(1, self.fleet_limit // self.live_workers)

    @property
    def in_force(self) -> int:
        """The most permits this process may hold now: the fleet's limit while Redis
        answers, its share during an outage or a rejoin (1 before the fleet was seen)."""
        client = self.client
        if client.state == "down" or client.rejoining:
            return self.local_share
        return self.fleet_limit

    async def enter(self, deadline: float | None) -> Lease:
        """A fleet permit, or :class:`OverloadedError` at ``deadline`` (a gateway clock
        reading). Never fails because Redis did: an outage admits on the local share."""
        lease = self.client.new_lease()
        if not self._turn.locked() and await self._try(lease):
            return lease
        clock = self.client.clock
        self._waiting += 1
        try:
            left = None if deadline is None else deadline - clock.now()
            with anyio.move_on_after(
                None if left is None else clock.to_real(max(0.0, left))
            ) as scope:
                async with self._turn:
                    while not await self._try(lease):
                        with anyio.move_on_after(self._poll_interval()):
                            await self._freed.wait()
                        if self._freed.is_set():
                            self._freed = anyio.Event()
                    return lease
            assert scope.cancelled_caught
            raise OverloadedError("no fleet permit before the deadline", backend=self.name)
        finally:
            self._waiting -= 1

    def acquire_script(
        self, now: int | str, lease_ms: int, lease: Lease
    ) -> tuple[str, list[str], list[Any]]:
        """The acquire script, its keys and its arguments before the carried releases
        (``now``: ``FleetClient.now_arg``)."""
        return (
            "ACQUIRE",
            [self.permits_key, self.pause_key, self.limit_key, self.waiters_key,
             self.workers_key],
            [now, lease_ms, self.limit, lease.id, 2 * lease_ms,
             "1" if self.marked else "0"],
        )

    def _poll_interval(self) -> float:
        client = self.client
        if client.state != "up":
            return client.probe_s
        return client.poll_s * (WAKE_BACKSTOP if client.wake.listening else 1.0)

    async def _try(self, lease: Lease) -> bool:
        client = self.client
        if client.state == "up":
            if client.rejoining and len(self.held) + self._asking >= self.local_share:
                # the others may still admit on their shares, unseen by Redis; new calls ask
                # at once, side by side, so the asks still out count too
                return False
            if self._reuse(lease):
                return True
            self._asking += 1
            try:
                granted, counted, pause_s, cap = await client.acquire(self, lease)
            except _Lost:
                granted = None  # its permits counted again: ask once more, within the share
            except _RedisDown:
                # a slow Redis may still run this acquire after we gave up on it: take that
                # grant back (at the rejoin), and go on under a fresh id — asking again when
                # only the loop was busy, else admitting locally
                client._pending.append((self.permits_key, lease.id))
                lease.id = client.new_lease().id
                return False if client.state == "up" else self._try_local(lease)
            finally:
                self._asking -= 1  # (no await until the grant is in ``held``)
            if granted is None:
                return await self._try(lease)
            self._answered_at = time.monotonic()
            self._fleet_in_flight = counted
            self._saw_fleet_limit(cap)
            if pause_s > 0 and self.on_pause is not None:
                self.on_pause(pause_s)
            if granted:
                lease.registered = True
                self.held.add(lease)
            return granted
        return self._try_local(lease)

    @property
    def hearing(self) -> bool:
        """Whether calls have reused permits and the fleet's pause and limit are due again
        (half the freshness a reuse needs: they stay fresh while the calls go on)."""
        return self._reusing and time.monotonic() - self._answered_at > REUSE_FRESH_S / 2

    def _heard(self, pause_ms: int, fleet: int, waiting: int, live: int) -> None:
        """The fleet's pause, limit, waiting processes and live workers, read with this
        process's releases: what keeps its calls reusing permits without an acquire of their
        own (and within their share: a process that started first counted itself alone)."""
        self._answered_at = time.monotonic()
        self.fleet_waiting = waiting
        self.live_workers = max(1, live)
        self._saw_fleet_limit(min(self.limit, fleet) if fleet > 0 else self.limit)
        pause_s = self.client.clock_s(pause_ms)
        if pause_s > 0 and self.on_pause is not None:
            self.on_pause(pause_s)

    def _reuse(self, lease: Lease) -> bool:
        """Admit on a permit this process ended a moment ago and has not released yet: the
        fleet still counts it, so keeping it for this call is what its release carried by
        this call's acquire would do, without either. Not when Redis has not answered this
        backend lately (a pause or a lower limit must be heard), nor when the call's RPM/TPM
        take must ride an acquire."""
        if not self._reusable or time.monotonic() - self._answered_at > REUSE_FRESH_S:
            return False
        others = self.fleet_waiting - (1 if self._waiting else 0)
        if others > 0 and len(self.held) >= self.fleet_limit / self.live_workers:
            return False  # at its share while another process waits: the permit is theirs
        if self.rider is not None and self.rider(lease.id) is not None:
            return False
        while self._reusable:
            lease_id = self._reusable.pop()
            if self.client.unqueue_release(self.permits_key, lease_id):
                lease.id = lease_id
                lease.registered = True
                lease.counted = self._fleet_in_flight
                lease.granted_at = self.client.clock.now()
                lease.granted_wall = self.client.fleet_time()
                self.held.add(lease)
                self.reused += 1
                self._reusing = True
                return True
        return False

    def _try_local(self, lease: Lease) -> bool:
        if len(self.held) < self.local_share:
            self.held.add(lease)
            return True
        return False

    def _saw_fleet_limit(self, other: int) -> None:
        """Another process configured this backend's limit as ``other``: warn once per value,
        naming both, and keep to the lower."""
        self.fleet_limit = min(self.limit, other)
        if other != self.limit and other not in self._warned_limits:
            self._warned_limits.add(other)
            log.warning(
                "gptgate: backend %r is configured with concurrency=%d here but %d by another "
                "process of the fleet: the fleet uses %d",
                self.name,
                self.limit,
                other,
                self.fleet_limit,
            )

    def leave(self, lease: object, /) -> None:
        """Hand the permit back (synchronous: the release is sent in the background)."""
        if not isinstance(lease, Lease) or lease not in self.held:
            return
        yields = self._yields(lease)
        self.held.discard(lease)
        self.client.release(self, lease, hurry=yields)
        if not yields:
            self._freed.set()  # this process's waiting call takes it back with the release

    def _yields(self, lease: Lease) -> bool:
        """Whether a permit this process ends goes to the fleet's oldest waiting process
        rather than to this process's own waiting call: when this process holds more than
        its share of the limit and another process waits. Else, with fewer permits than
        processes, the processes holding one kept it for good and the others' calls waited
        until they failed."""
        client = self.client
        others = self.fleet_waiting - (1 if self._waiting else 0)
        return (
            lease.registered
            and others > 0
            and client.wake.listening
            and len(self.held) > self.fleet_limit / self.live_workers
        )

    def wake(self) -> None:
        """Another process released a permit for this one (Redis keeps it reserved for this
        process, gptgate/shared/scripts.py): the waiting head asks now. With no call waiting
        any more, the reservation goes back at once, to the next waiting process."""
        if self._waiting:
            self._freed.set()
        else:
            self.client.release_reservation(self)

    def pause(self, seconds: float) -> None:
        """A 429's retry-after: every process of the fleet honours it."""
        self.client.pause(self, seconds)

    def statistics(self) -> FleetStatistics:
        return FleetStatistics(
            limit=self.fleet_limit,
            fleet_in_flight=self._fleet_in_flight,
            held=len(self.held),
            waiting=self._waiting,
            state=self.client.state,
            seen=self.client.seen,
            local_share=self.local_share,
            in_force=self.in_force,
            live_workers=self.live_workers,
            outages=self.client.outages,
            loop_busy=self.client.loop_busy,
            slow_ops=self.client.slow_ops,
            reused=self.reused,
            losses=self.client.losses,
        )
