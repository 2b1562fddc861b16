"""Fleet-wide cache warm-up single-flight: one warm-up per prefix per backend across the fleet.

Each process's :class:`~gptgate.cache.CacheGate` already lets one call warm a cold prefix and
holds the others of its group until that call's prefill. Without ``shared=`` every process
does so on its own: N processes send N warm-ups of the same prefix, all cold, and pay N full
prefills. With ``shared=``, the call a gate picks to warm a prefix first *claims* it in Redis
(:data:`~gptgate.shared.scripts.WARM_CLAIM`: the claim is a key with a lease):

* claimed — this call warms it; at its prefill the prefix is marked warm for the fleet
  (:data:`~gptgate.shared.scripts.WARM_DONE`), and a warm-up that fails ends the claim at
  once, so another process warms instead;
* already warm — another process warmed it: the call goes as an ordinary one (its group
  ramps from here, and its hits count);
* claimed by another process — the call waits, asking again every ``poll_s`` (and no later
  than the claim's lease runs out), bounded by its own deadline (the gate's wait is). A
  claimant that died holds the prefix only until its lease lapses; then the next asker
  claims it.

The waiting costs one small script per waiting group per ``poll_s`` per process (the other
calls of the group wait locally behind it), and a warm prefix one script for the first call
of its group in each process. Redis away: the gate warms locally, as without ``shared=``.

The hit-rate estimate and the ramp window are the fleet's too: every ``SYNC_S`` each process
adds the cached and cacheable input tokens its calls observed, per prefix and per backend,
to Redis, says which prefixes it has calls on, and reads back the sums and how many
processes call each prefix (:data:`~gptgate.shared.scripts.WARM_COUNTS`, one script per
backend, off the calls' path; a prefix's counts expire with it). ``CacheGate.fleet_hit_rate``
and each group's ``fleet_hit_rate`` show the sums; a lone group's ramp window is shared among
the processes calling its prefix (``CacheGate.set_fleet_members``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from . import scripts
from .fleet import _RedisDown

if TYPE_CHECKING:
    from ..routing import BackendState
    from .fleet import FleetClient

__all__ = ["WARM_TTL_S", "FleetWarmup", "FleetWarmupStatistics", "fleet_keys"]

#: how long the fleet trusts a prefix marked warm (seconds of the gateway's clock): the
#: providers keep a cached prefix minutes after its last use (OpenAI: 5 to 10), and every
#: process that finds it warm renews it
WARM_TTL_S = 300.0
#: how often a process sends its hit counts and reads the fleet's (real seconds)
SYNC_S = 0.5
#: prefix groups whose fleet hit rate a process remembers, at most
MAX_GROUPS = 10_000
#: a process counts among a prefix's processes this long after its last sync (real seconds)
MEMBER_S = 5 * SYNC_S


@dataclass(frozen=True, slots=True)
class FleetWarmupStatistics:
    #: warm-ups this process sent for the fleet (it held the claim)
    claimed: int
    #: cold groups this process found warmed by another process (no warm-up sent)
    joined: int
    #: of those, how many waited for another process's warm-up in flight
    waited: int


class FleetWarmup:
    """The fleet's warm-up claims for one gateway's backends (see the module docstring)."""

    def __init__(
        self,
        client: FleetClient,
        *,
        keys: Mapping[str, str],
        task_group: anyio.abc.TaskGroup,
        poll_s: float = 0.01,
    ) -> None:
        self.client = client
        #: backend name → its fleet key (namespace + name + base_url + model)
        self.keys = dict(keys)
        self._task_group = task_group
        #: how often a call waiting for another process's warm-up asks again (real seconds)
        self.poll_s = poll_s
        self._ids = itertools.count()
        #: (backend, prefix) → [cached, cacheable] observed here and not sent yet
        self._counts: dict[tuple[str, str], list[int]] = {}
        #: the fleet's sums as last read: per backend, and per (backend, prefix)
        self.fleet_totals: dict[str, tuple[int, int]] = {}
        self.fleet_groups: dict[tuple[str, str], tuple[int, int]] = {}
        #: the (backend, prefix) groups with calls in this process now (the gate's)
        self.live_groups: Callable[[], Iterable[tuple[str, str]]] | None = None
        #: told how many processes have calls on a live group (the gate's ramp share)
        self.on_members: Callable[[str, str, int], None] | None = None
        self._claimed = 0
        self._joined = 0
        self._waited = 0

    def _keys(self, backend: str, prefix: str) -> list[str] | None:
        key = self.keys.get(backend)
        if key is None:
            return None
        return [f"{key}:warm:{prefix}", f"{key}:claim:{prefix}"]

    def _ms(self, seconds: float) -> int:
        return max(1, int(self.client.clock.to_real(seconds) * 1000))

    async def claim(self, backend: str, prefix: str) -> str | None:
        """May this call warm ``prefix`` on ``backend``? None: no, the fleet has it warm (go
        as an ordinary call). Else this call warms it, holding the claim returned ("" when
        no fleet claim was taken: Redis away, or a backend not shared)."""
        keys = self._keys(backend, prefix)
        client = self.client
        if keys is None:
            return ""
        register(client)
        claim_id = f"{client.worker_id}:w{next(self._ids)}"
        lease_ms = int(client.shared.lease_s * 1000)
        waited = False
        while client.state == "up":
            try:
                answer = int(
                    await client._op(
                        "WARM_CLAIM", keys, [claim_id, lease_ms, self._ms(WARM_TTL_S)]
                    )
                )
            except _RedisDown:
                break
            if answer == 0:
                self._joined += 1
                self._waited += waited
                return None
            if answer < 0:
                self._claimed += 1
                return claim_id
            waited = True
            await anyio.sleep(min(answer / 1000.0, self.poll_s))
        return ""

    def done(self, backend: str, prefix: str, claim_id: str | None, *, warm: bool) -> None:
        """The warm-up was prefilled (``warm``) or failed: tell the fleet (in the background:
        the call's path never waits for it)."""
        keys = self._keys(backend, prefix)
        if keys is None or self.client.state != "up" or (not warm and not claim_id):
            return
        # the gateway closed meanwhile: the claim lapses with its lease
        with contextlib.suppress(RuntimeError):
            self._task_group.start_soon(self._done, keys, claim_id or "", warm)

    async def _done(self, keys: list[str], claim_id: str, warm: bool) -> None:
        register(self.client)
        # Redis away: a claim lapses with its lease; the prefix warms again, at worst
        with contextlib.suppress(_RedisDown):
            await self.client._op(
                "WARM_DONE", keys, [claim_id, "warm" if warm else "failed", self._ms(WARM_TTL_S)]
            )

    def count(self, backend: str, prefix: str, cached: int, cacheable: int) -> None:
        """A call's cached and cacheable input tokens, for the fleet's hit rate."""
        if backend in self.keys:
            counts = self._counts.setdefault((backend, prefix), [0, 0])
            counts[0] += cached
            counts[1] += cacheable

    async def run(self) -> None:
        """Every ``SYNC_S``: send the counts observed here, read the fleet's sums back."""
        while True:
            await anyio.sleep(SYNC_S)
            await self.sync()

    async def sync(self) -> None:
        """One round trip per backend: add the counts observed here, say which prefixes
        this process has calls on, read back the fleet's sums and each prefix's processes
        (told to ``on_members``: the gate shares its ramp windows among them)."""
        live = set(self.live_groups()) if self.live_groups is not None else set()
        if (not self._counts and not live) or self.client.state != "up":
            return
        register(self.client)
        counts, self._counts = self._counts, {}
        by_backend: dict[str, list[tuple[str, list[int]]]] = {}
        for group in live | set(counts):
            backend, prefix = group
            if backend in self.keys:
                by_backend.setdefault(backend, []).append((prefix, counts.get(group, [0, 0])))
        ttl_ms = self._ms(WARM_TTL_S)
        member_ms = int(MEMBER_S * 1000)
        for backend, groups in by_backend.items():
            key = self.keys[backend]
            keys = [f"{key}:hits"]
            for prefix, _ in groups:
                keys += [f"{key}:hits:{prefix}", f"{key}:members:{prefix}"]
            args = [ttl_ms, self.client.worker_id, self.client.now_arg(), member_ms]
            args += [n for _, pair in groups for n in pair]
            try:
                answer = await self.client._op("WARM_COUNTS", keys, args)
            except _RedisDown:  # not counted twice: what Redis may have added is dropped
                return
            sums = [int(x) for x in answer]
            self.fleet_totals[backend] = (sums[0], sums[1])
            if len(self.fleet_groups) > MAX_GROUPS:  # the live ones come back at their sync
                self.fleet_groups.clear()
            for g, (prefix, _) in enumerate(groups):
                cached, cacheable, members = sums[2 + 3 * g: 5 + 3 * g]
                self.fleet_groups[(backend, prefix)] = (cached, cacheable)
                if self.on_members is not None and (backend, prefix) in live:
                    self.on_members(backend, prefix, members)

    def hit_rate(self, backend: str, prefix: str | None = None) -> float | None:
        """The fleet's cached over cacheable input tokens (None before any was read)."""
        pair = (
            self.fleet_totals.get(backend) if prefix is None
            else self.fleet_groups.get((backend, prefix))
        )
        return pair[0] / pair[1] if pair and pair[1] else None

    def statistics(self) -> FleetWarmupStatistics:
        return FleetWarmupStatistics(
            claimed=self._claimed, joined=self._joined, waited=self._waited
        )


def fleet_keys(client: FleetClient, states: Iterable[BackendState]) -> dict[str, str]:
    """Each backend's fleet key, by name: the same backend (name + base_url + model) shares
    its warm prefixes across the fleet."""
    return {
        s.name: client.key_of(s.backend)
        for s in states
    }


def register(client: FleetClient) -> None:
    """Load the warm-up scripts into ``client`` (with ``shared=`` only)."""
    if client._redis is not None:
        for name in ("WARM_CLAIM", "WARM_COUNTS", "WARM_DONE"):
            if name not in client._scripts:
                client._scripts[name] = client._redis.register_script(getattr(scripts, name))
