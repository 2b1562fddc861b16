"""``shared=`` with signals on: one process of the fleet reads a server's signals.

Without this, 64 worker processes each scraped one server every interval. Now a lease per
backend (a Redis key naming its holder, for two intervals) picks the reader; it publishes
each good read dated on the fleet's clock (Redis's, ``FleetClient.fleet_time``: a holder
whose own clock is off does not make its read look fresh or stale), and the others take that
instead of reading. A
holder that dies lets its lease lapse and the next process to look takes over. Redis away:
each process reads for itself, as without ``shared=``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from typing import Literal

from .shared.fleet import FleetClient, _RedisDown
from .signals_parse import ServerLoad

__all__ = ["SignalShare"]

#: KEYS: lease, load. ARGV: worker id, lease ms. → {1} this worker reads (lease taken or
#: renewed), or {0, the published load or false}
SIGNALS_TURN = """
local holder = redis.call('GET', KEYS[1])
if not holder or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
return {0, redis.call('GET', KEYS[2]) or false}
"""

#: KEYS: load. ARGV: the load as JSON, ms to keep it.
SIGNALS_PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


class SignalShare:
    """One backend's signals lease and published read, for a :class:`SignalReader`."""

    def __init__(self, client: FleetClient, key: str, interval_s: float) -> None:
        self.client = client
        self._keys = [f"{key}:signals:lease", f"{key}:signals:load"]
        real = client.clock.to_real(interval_s)
        self._lease_ms = max(1, int(2 * real * 1000))
        self._keep_ms = max(1, int(3 * real * 1000))

    def _register(self) -> None:
        client = self.client
        if client._redis is not None:
            for name, text in (("SIGNALS_TURN", SIGNALS_TURN), ("SIGNALS_PUT", SIGNALS_PUT)):
                if name not in client._scripts:
                    client._scripts[name] = client._redis.register_script(text)

    async def turn(self) -> tuple[Literal["read", "follow"], tuple[ServerLoad, float] | None]:
        """``("read", None)``: this process reads (it holds the lease, or Redis is away);
        ``("follow", (load, age_s))``: the holder's last read, ``age_s`` old on the
        fleet's clock (None: it has published nothing yet)."""
        if self.client.state != "up":
            return "read", None
        self._register()
        try:
            answer = await self.client._op(
                "SIGNALS_TURN", self._keys, [self.client.worker_id, self._lease_ms]
            )
        except _RedisDown:
            return "read", None
        if int(answer[0]) == 1:
            return "read", None
        raw = answer[1] if len(answer) > 1 else None
        if not raw:
            return "follow", None
        try:
            record = json.loads(raw)
            load = ServerLoad(**record["load"])
            age = max(0.0, self.client.fleet_time() - float(record["wall"]))
        except (ValueError, TypeError, KeyError):
            return "follow", None
        return "follow", (load, age / self.client.clock.to_real(1.0))

    async def publish(self, load: ServerLoad) -> None:
        """The holder's good read, for the fleet."""
        if self.client.state != "up":
            return
        record = json.dumps({"load": asdict(load), "wall": self.client.fleet_time()})
        with contextlib.suppress(_RedisDown):
            await self.client._op("SIGNALS_PUT", self._keys[1:], [record, self._keep_ms])
