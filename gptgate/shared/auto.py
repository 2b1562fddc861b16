"""Fleet-wide ``concurrency="auto"``: one limit for every process of a fleet.

Each process publishes its finished calls (:class:`~gptgate.shared.leader.FleetSample`: when
the fleet permit was granted, how long it was held, latency, the fleet's in-flight count at
the grant, the outcome) in batches that ride the round trips a call makes anyway — the next
acquire on the backend, or the pipelined release — so the hot path stays at two Redis round
trips per call at most. One process, the *leader*, holds a lease on the backend's leader key
(renewed every ``lead_s``, ``lease_s`` × 3/4 long): it drains the batches, feeds them to one
``LLMLimit`` (:class:`~gptgate.shared.leader.FleetLeader`) and publishes that limit, which the
acquire script applies as the fleet's cap. Every process's local limit follows the published
value (:class:`FleetAutoLimit`), so the Limit/Limiter split holds: the leader's limit is a
pure, clock-driven Limit, and each process's Limiter enforces.

Hand-over: a leader that closes resigns (another process leads from its next round); one
that dies or stops answering loses the lead once its lease runs out, and a follower (a round
every ``lease_s / 4``) takes it within ``lease_s``. The new leader warm-starts
from the limit state the last one kept in Redis (``LLMLimit.restore``: probing around its
knee, watched). Outage: as with a fixed limit, the process admits on its share of the last
limit it saw; its samples are not published meanwhile (their in-flight counts are not the
fleet's), and it rejoins as a follower.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .fleet import FleetAdmission, FleetStatistics, Lease
from .leader import FleetLeader, FleetSample, encode

if TYPE_CHECKING:
    from ..limits.base import Limit, Sample
    from .fleet import FleetClient

__all__ = ["FleetAutoAdmission", "FleetAutoLimit"]

#: samples a process keeps before it sends them on their own (nothing carried them)
_OUTBOX_SEND = 256
#: samples a process keeps at most (a backlog Redis did not take is dropped, oldest first)
_OUTBOX_MAX = 4096


class FleetAutoAdmission(FleetAdmission):
    """One ``concurrency="auto"`` backend's fleet permits, samples and leadership."""

    fixed = False

    def __init__(
        self,
        client: FleetClient,
        *,
        name: str,
        key: str,
        own: Limit,
        factory: Callable[[int], Limit],
        on_pause: Callable[[float], None] | None,
    ) -> None:
        super().__init__(
            client,
            name=name,
            permits_key=f"{key}:permits",
            pause_key=f"{key}:pause",
            limit_key=f"{key}:auto",
            workers_key=f"{key}:workers",
            limit=max(1, own.limit),
            on_pause=on_pause,
        )
        self.samples_key = f"{key}:samples"
        self.leader_key = f"{key}:leader"
        self.state_key = f"{key}:state"
        #: this process's own limit: the fleet's algorithm the first time it leads
        self._own: Limit | None = own
        #: where each process's own limit starts (``initial_concurrency``)
        self._initial = max(1, own.limit)
        #: the fleet's first leader has fed no sample yet: its start follows the live workers
        self._cold = False
        #: a fresh limit starting at the given limit
        self._factory = factory
        #: during an outage: this process's own limit over its own calls, at most its share
        self._outage: Limit | None = None
        #: the fleet's limit while this process leads (None when it follows)
        self.leader: FleetLeader | None = None
        #: the highest fleet limit this process has seen (benchmarks: peak vs limit)
        self.highest = self.fleet_limit
        #: how many times this process took the lead
        self.terms = 0
        self._outbox: list[FleetSample] = []
        #: the limit this round publishes, confirmed (and dated) by its reply
        self._publishing: int | None = None
        self._last_left: Lease | None = None
        #: the local Limit that follows the fleet's (the backend's Limiter enforces it)
        self.local = FleetAutoLimit(self)

    @property
    def leading(self) -> bool:
        return self.leader is not None

    @property
    def unpublished(self) -> bool:
        """Whether this process leads and has a limit the fleet has not been told yet."""
        return self.leader is not None and self.leader.unpublished

    # -- the hot path ---------------------------------------------------------------------

    def acquire_script(
        self, now: int | str, lease_ms: int, lease: Lease
    ) -> tuple[str, list[str], list[Any]]:
        # proposed cap while no limit is published (Redis restarted, no leader yet): the
        # last one this process saw
        return (
            "ACQUIRE_AUTO",
            [self.permits_key, self.pause_key, self.limit_key, self.samples_key,
             self.waiters_key, self.workers_key],
            [now, lease_ms, self.fleet_limit, lease.id, 2 * lease_ms,
             self.take_samples(), "1" if self.marked else "0"],
        )

    @property
    def local_share(self) -> int:
        """This process's part of the fleet's last limit while Redis is away — and less when
        its own calls say so: during an outage it learns alone, as without ``shared=``."""
        share = super().local_share
        return share if self._outage is None else min(share, max(1, self._outage.limit))

    async def _try(self, lease: Lease) -> bool:
        if self.client.state == "up":
            self._outage = None  # back in the fleet: the leader's limit again
        return await super()._try(lease)

    def _try_local(self, lease: Lease) -> bool:
        if self._outage is None:
            share = self.local_share
            self._outage = self._factory(share)
            set_window = getattr(self._outage, "set_window", None)
            if callable(set_window):
                set_window(None, share)  # up to its share, never above: the fleet's bound
        if not super()._try_local(lease):
            return False
        lease.granted_at = self.client.clock.now()
        return True

    def _saw_fleet_limit(self, other: int) -> None:
        """The cap the acquire applied: the published limit (or our proposal). The leader
        goes by its own limit, which the fleet reads from its next round."""
        if self.leader is None:
            self.follow(other)

    def leave(self, lease: object, /) -> None:
        # the sample of this permit comes next (Permit ends the lease, then updates the limit)
        self._last_left = lease if isinstance(lease, Lease) and lease in self.held else None
        super().leave(lease)

    def record(self, sample: Sample) -> None:
        """Queue the sample of the permit that just ended, for the leader. Only a permit the
        fleet granted is published: one granted locally during an outage has no fleet
        in-flight count, and a sample of it would mislead the leader — it feeds this
        process's own outage limit instead."""
        lease, self._last_left = self._last_left, None
        client = self.client
        clock = client.clock
        if lease is None:
            return
        if lease.counted is None:
            if self._outage is not None:
                # from its local grant: a wait before it was not at this limit's door
                self._outage.update(replace(sample, start=lease.granted_at), clock.now())
            return
        if client.state != "up":
            return
        self._outbox.append(
            FleetSample(
                granted_wall=lease.granted_wall,
                hold_s=clock.to_real(max(0.0, clock.now() - lease.granted_at)),
                latency_s=clock.to_real(max(0.0, sample.latency_s)),
                inflight=lease.counted,
                kind="ok" if sample.kind == "ok" else "dropped",
                ttft_s=None if sample.ttft_s is None else clock.to_real(sample.ttft_s),
                input_tokens=sample.input_tokens,
                output_tokens=sample.output_tokens,
                congestion=sample.congestion,
                rate_limited=sample.rate_limited,
                cap=lease.cap,
            )
        )
        if len(self._outbox) > _OUTBOX_MAX:
            del self._outbox[: len(self._outbox) - _OUTBOX_MAX]
        if len(self._outbox) >= _OUTBOX_SEND:
            client.kick()

    @property
    def has_samples(self) -> bool:
        return bool(self._outbox)

    def take_samples(self) -> str:
        """The queued samples as one batch ('' none), taken off the queue."""
        if not self._outbox:
            return ""
        batch, self._outbox = self._outbox, []
        return encode(batch)

    # -- following ------------------------------------------------------------------------

    def follow(self, limit: int) -> None:
        """The fleet's limit is ``limit``: this process's local limit follows it."""
        if limit <= 0:
            return
        grew = limit > self.fleet_limit
        self.fleet_limit = limit
        self.highest = max(self.highest, limit)
        if grew:
            self.local.grew()

    # -- leadership (the background task's rounds) ----------------------------------------

    def lead_script(self, now: int | str, lease_ms: int) -> tuple[list[str], list[Any]]:
        """The LEAD script's keys and arguments: as the leader, publish the limit and keep
        its state for a successor; without a limit of its own, ask for the kept state."""
        publish, state = 0, ""
        if self.leader is None and self._own is not None:
            publish = self._own.limit  # where none is published: the fleet's first leader
        if self.leader is not None:
            publish = self.leader.limit
            self._publishing = publish
            export = getattr(self.leader.algorithm, "export_state", None)
            saved = export() if callable(export) else None
            if saved is not None:
                state = json.dumps(saved, separators=(",", ":"))
        ttl = max(8 * lease_ms, 60_000)
        return (
            [self.leader_key, self.samples_key, self.limit_key, self.state_key,
             self.permits_key, self.waiters_key],
            [self.client.worker_id, now, lease_ms, publish, state, ttl,
             "0" if self.leader is not None else "1"],
        )

    def led(self, reply: Any) -> None:
        """What the round answered: leading or not, the published limit, the drained
        sample batches, the kept state (when asked), and when it ran on Redis's clock — the
        publish's date, on the clock the samples' grants are dated by."""
        from .leader import decode

        leading, published, batches, kept, now_ms = reply
        publishing, self._publishing = self._publishing, None
        if not int(leading):
            self.resign()
            self.follow(int(published))
            return
        client = self.client
        if self.leader is not None and publishing == self.leader.limit:
            self.leader.published(int(now_ms) / 1000.0)
        if self.leader is None:
            self.leader = FleetLeader(self._take_over(kept), to_real=client.clock.to_real(1.0))
            self.terms += 1
            if self.local.rate is not None:
                self.local.set_rate_ceiling(self.local.rate)
        samples = [s for batch in batches for s in decode(batch)]
        if self._cold:
            self._start_for_the_fleet(bool(samples))
        self.leader.feed(samples, now=client.clock.now(), wall=client.fleet_time())
        self.follow(self.leader.limit)

    def _take_over(self, kept: Any) -> Limit:
        """The fleet's algorithm for a new leader: warm from the state the last leader kept,
        else the limit this process kept from an earlier term, else — the fleet's first
        leader — its own limit; a process that has only followed starts a fresh one at half
        the fleet's limit (its own initial one, never used, was a fall to ``initial`` after a
        Redis restarted empty; at the fleet's limit itself, slow start's first doubling went
        to twice a limit already probing above the knee: 116 in flight on the cache server)."""
        if kept:
            limit = self._factory(self.fleet_limit)
            restore = getattr(limit, "restore", None)
            if callable(restore):
                try:
                    state = json.loads(kept)
                    if isinstance(state, Mapping):
                        restore(state)
                        return limit
                except ValueError:
                    pass  # not a state this version reads: start as below
        own, self._own = self._own, None
        if own is not None and (self.terms > 0 or own.limit == self.fleet_limit):
            self._cold = (  # a limit that slow-starts from initial (not a fixed one)
                self.terms == 0
                and own.limit == self._initial
                and bool(getattr(own, "in_slow_start", False))
            )
            return own
        return self._factory(max(1, self.fleet_limit // 2))

    def _start_for_the_fleet(self, sampled: bool) -> None:
        """The fleet's first limit starts where its processes' own limits would have
        started together: ``initial_concurrency`` × the live workers, not ``initial`` for
        the whole fleet (a slow start of 4 → 64 took a tenth of a 4 s job on the cache
        server, while per-process limits start at 4 each). Set again as workers join, until
        the first sample: from then on the algorithm's own state leads."""
        assert self.leader is not None
        if sampled or self.leader.fed:
            self._cold = False
            return
        # the renewal's count is there before any call; an acquire's may be newer
        start = self._initial * max(self.live_workers, self.client.live_workers)
        if start > self.leader.limit:
            self.leader = FleetLeader(
                self._factory(start), to_real=self.client.clock.to_real(1.0)
            )

    def resign(self) -> None:
        """Stop leading (closed, or Redis away: the lease lapses). Its limit is kept for a
        next term when no state is kept in Redis (a restarted Redis has none): a fresh one
        would slow-start again, past the knee."""
        if self.leader is not None:
            self._own = self.leader.algorithm
        self.leader = None

    def statistics(self) -> FleetStatistics:
        return replace(super().statistics(), leader=self.leading)


class FleetAutoLimit:
    """The local :class:`~gptgate.limits.Limit` of a ``concurrency="auto"`` backend with
    ``shared=``: the fleet's published limit (its Limiter admits up to it; the acquire script
    keeps the fleet under it), fed samples that go to the leader."""

    #: the limit is the whole fleet's: its rate ceiling is the fleet's whole RPM/TPM budget
    fleet_wide = True

    def __init__(self, admission: FleetAutoAdmission) -> None:
        self._admission = admission
        #: told when the fleet's limit grew (the Limiter admits its waiters)
        self.on_grow: Callable[[], None] | None = None
        #: the rate ceiling last set (a new leader's limit gets it too)
        self.rate: float | None = None

    @property
    def limit(self) -> int:
        admission = self._admission
        if admission.client.state == "down":
            # calls wait here, before their permit, not at the admission with one held
            return admission.local_share
        return max(1, admission.fleet_limit)

    def update(self, sample: Sample, now: float) -> None:
        self._admission.record(sample)

    def grew(self) -> None:
        if self.on_grow is not None:
            self.on_grow()

    # what stats() and the pacer ask of an adaptive limit: the leader's, when this leads
    @property
    def in_slow_start(self) -> bool | None:
        leader = self._admission.leader
        value = getattr(leader.algorithm, "in_slow_start", None) if leader else None
        return value if isinstance(value, bool) else None

    @property
    def events(self) -> dict[str, int]:
        leader = self._admission.leader
        events = getattr(leader.algorithm, "events", None) if leader else None
        return dict(events) if isinstance(events, Mapping) else {}

    def set_rate_ceiling(self, calls_per_s: float | None) -> None:
        """The fleet's rate limit (RPM/TPM headers are per API key: every process reads the
        same): the leader's limit stays under its ceiling."""
        self.rate = calls_per_s
        leader = self._admission.leader
        set_rate = getattr(leader.algorithm, "set_rate_ceiling", None) if leader else None
        if callable(set_rate):
            set_rate(calls_per_s)

    def export_state(self) -> dict[str, float] | None:
        leader = self._admission.leader
        export = getattr(leader.algorithm, "export_state", None) if leader else None
        state = export() if callable(export) else None
        if isinstance(state, dict) and all(isinstance(v, float) for v in state.values()):
            return state
        return None

    def __repr__(self) -> str:
        role = "leader" if self._admission.leading else "follower"
        return f"FleetAutoLimit({self.limit}, {role})"
