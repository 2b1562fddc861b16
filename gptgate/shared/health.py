"""Fleet-wide circuit breakers: a backend one process finds down is down for every process,
and when its cool-down ends one process of the fleet probes it, not every one.

One :class:`FleetHealth` per backend (fixed or adaptive limit alike) listens to the local
:class:`~gptgate.routing.CircuitBreaker`: an open it caused is published with its cool-down,
a close (a call that succeeded on it) too. The fleet client's background task reads every
backend's circuit every ``HEALTH_POLL_S`` and applies it here (another process's open opens
this breaker; another's successful probe closes a breaker the fleet opened). Nothing of it is
on a call's path but a half-open probe, which first asks Redis whether it may go
(:meth:`FleetHealth.may_probe`, one round trip, once per cool-down). With Redis away the
breakers are local, as without ``shared=``. An open caused by a refused key (401/403) stays
local: the key is this process's, and the fleet's processes may hold different ones (an old
pod's revoked key opened the circuit of the new pods whose key worked). An empty account
(``OutOfFundsError``, even a 403) is the fleet's: every process draws on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..routing import CircuitBreaker
    from .fleet import FleetClient

__all__ = ["HEALTH_POLL_S", "FleetHealth"]

#: how often a process reads its backends' fleet circuits (real seconds)
HEALTH_POLL_S = 0.5
#: a half-open call refused its probe waits at most this long (real ms) before asking again
_RECHECK_MS = 1000


class FleetHealth:
    """One backend's circuit as the fleet sees it, kept in step with the local breaker."""

    def __init__(
        self, client: FleetClient, *, name: str, key: str, breaker: CircuitBreaker,
        probe_s: float,
    ) -> None:
        self.client = client
        self.name = name
        self.circuit_key = f"{key}:circuit"
        self.probe_key = f"{key}:probe"
        self.breaker = breaker
        #: how long one probe may take (the backend's attempt timeout), real seconds
        self.probe_s = probe_s
        self.prober_id = f"{client.worker_id}:{name}"
        #: what this process saw and has not published yet: ("open", cool-down s) or
        #: ("closed", 0)
        self.to_send: tuple[Literal["open", "closed"], float] | None = None
        #: this process's probe ended without a verdict: its lease is to be handed back
        self.probe_to_leave = False
        breaker.on_transition = self._saw
        breaker.on_probe_left = self._left

    def _saw(self, opened: bool, cooldown_s: float) -> None:
        if self.client.state != "up":
            return
        cause = self.breaker.cause
        if opened and cause is not None and cause.refused_key:
            # the key this process holds was refused, not the backend: other processes may
            # hold another (a rotation under way, a fleet_key's keys). Kept here, and a probe
            # lease it took goes back (an open would have cleared it)
            self.probe_to_leave = True
            self.client.kick()
            return
        self.to_send = ("open", cooldown_s) if opened else ("closed", 0.0)
        self.client.kick()

    def _left(self) -> None:
        if self.client.state == "up":
            self.probe_to_leave = True
            self.client.kick()

    def _own_key_open(self) -> bool:
        """Open here by this process's refused key: the fleet may lengthen it, and its
        probe's success elsewhere does not close it (the key is still refused)."""
        breaker = self.breaker
        cause = breaker.cause
        return (not breaker.forced and breaker.failures >= breaker.threshold
                and cause is not None and cause.refused_key)

    def apply(self, state: int, left_ms: int) -> None:
        """What the poll read: 1 open for ``left_ms`` more, 2 closed by a probe, 0 neither."""
        clock = self.client.clock
        if state == 1 and left_ms > 0:
            now = clock.now()
            self.breaker.force_open(now, now + self.client.clock_s(left_ms),
                                    fleets=not self._own_key_open())
        elif state == 2:
            self.breaker.force_close()

    async def may_probe(self) -> bool:
        """May this half-open call probe the backend? No while the fleet holds the circuit
        open or another process is probing (this breaker then stays open that long, and the
        call goes elsewhere); yes with Redis away (the breaker is local then)."""
        from .fleet import _RedisDown

        client = self.client
        if client.state != "up":
            return True
        try:
            left_ms = int(
                await client._op(
                    "PROBE",
                    [self.circuit_key, self.probe_key],
                    [self.prober_id, max(1, int(self.probe_s * 1000))],
                )
            )
        except _RedisDown:
            return True
        if left_ms <= 0:
            return True
        # open until the fleet's verdict, but ask again within a poll or two: a probe that
        # succeeds elsewhere closes the circuit long before its time is up
        now = client.clock.now()
        self.breaker.force_open(now, now + client.clock_s(min(left_ms, _RECHECK_MS)),
                                fleets=not self._own_key_open())
        return False
