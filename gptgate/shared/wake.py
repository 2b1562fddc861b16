"""Waking a process that waits for the fleet when another process releases a permit.

Without this, a call refused a fleet permit learns of a release elsewhere only at its next poll
(``FleetClient.poll_s``, 5 ms real — 100 ms of a simulator's time at time scale 20), and every
waiting process polls Redis every 5 ms. Now the acquire script that refuses a process queues
it in the backend's *waiters* set (one entry per process: only the head of its local queue
asks Redis), and every script that frees permits pops as many waiters as it freed and
PUBLISHes on each one's own channel (gptgate/shared/scripts.py). Each
:class:`~gptgate.shared.fleet.FleetClient` keeps one subscriber connection, on its own
(outside the connection pool of the operations), listening to its channels: a message wakes
the backend's waiting head, which asks Redis at once. The poll stays as the backstop (a lost
message, a subscriber reconnecting after an outage), ten times longer while the subscriber
listens (``WAKE_BACKSTOP``).

With nobody waiting, a release costs Redis one lookup of an absent key and no message.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from .fleet import FleetAdmission, FleetClient

__all__ = ["FleetWake", "channel", "waiters_key"]

log = logging.getLogger("gptgate")


def waiters_key(permits_key: str) -> str:
    """The backend's waiters sorted set (worker id → when it began waiting, ms): next to its
    permits, in the same hash slot."""
    return f"{permits_key}:waiters"


def channel(waiters: str, worker_id: str) -> str:
    """The channel a process is woken on for one backend (the scripts build the same name)."""
    return f"{waiters}|{worker_id}"


class FleetWake:
    """One process's subscriber: which admission each of its channels wakes, and the
    background task that listens (reconnecting after an outage, once Redis answers again)."""

    def __init__(self, client: FleetClient) -> None:
        self.client = client
        self._admissions: dict[str, FleetAdmission] = {}
        self._redis: Any = None
        self._pubsub: Any = None
        #: wake messages received (each one woke a waiting head, or found none left)
        self.received = 0
        #: subscriptions made (1 + one per reconnect after an outage)
        self.subscriptions = 0
        self._added = anyio.Event()
        self._listening: anyio.CancelScope | None = None
        self._closed = False

    @property
    def listening(self) -> bool:
        """Whether a wake-up can reach this process now (subscribed, its task reading)."""
        return self._pubsub is not None and self._listening is not None

    def add(self, admission: FleetAdmission) -> None:
        """Listen for this backend too (an admission made after the start: subscribe again)."""
        self._admissions[channel(admission.waiters_key, self.client.worker_id)] = admission
        self._added.set()
        if self._listening is not None:
            self._listening.cancel()

    async def subscribe(self) -> bool:
        """Open the subscriber connection and subscribe to every channel, within the op
        budget; False (the poll alone, until the next try) when Redis does not answer."""
        if not self._admissions:
            return False
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        client = self.client
        await self._disconnect()
        backstop = max(1.0, 10 * client.shared.op_budget_s)
        # its own connection: a subscriber holds it for good, and the operations' pool must
        # not lose one to it
        self._redis = Redis.from_url(
            client.shared.url, socket_connect_timeout=backstop, health_check_interval=0,
            retry=Retry(NoBackoff(), 0),
        )
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            with anyio.fail_after(client.shared.op_budget_s):
                await self._pubsub.subscribe(*self._admissions)
        except client._errors:
            await self._disconnect()
            return False
        self.subscriptions += 1
        return True

    async def run(self) -> None:
        """Listen; after a lost connection, subscribe again once the client is back up (an
        outage's probe decides that), every ``probe_s`` at most."""
        client = self.client
        # RuntimeError: redis-py's answer to a read on a subscriber closed meanwhile
        lost_with: tuple[type[BaseException], ...] = (*client._errors, RuntimeError)
        while not self._closed:
            if not self._admissions:
                await self._added.wait()
            self._added = anyio.Event()
            pubsub = self._pubsub
            if pubsub is None or not pubsub.subscribed:
                if client.state != "up" or not await self.subscribe():
                    await anyio.sleep(client.probe_s)
                    continue
                pubsub = self._pubsub
                if pubsub is None:  # closed meanwhile
                    continue
            lost = False
            with anyio.CancelScope() as self._listening:
                try:
                    await self._listen(pubsub)
                except lost_with as error:
                    log.debug("gptgate: fleet wake-ups lost (%s): polling until resubscribed",
                              type(error).__name__)
                    lost = True
            self._listening = None
            if lost or self._added.is_set():  # an admission added: its channel too
                await self._disconnect()
            if lost:
                await anyio.sleep(client.probe_s)

    async def _listen(self, pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            if message is None or message.get("type") != "message":
                continue
            name = message["channel"]
            admission = self._admissions.get(name.decode() if isinstance(name, bytes) else name)
            if admission is not None:
                self.received += 1
                admission.wake()

    async def aclose(self) -> None:
        """Stop listening for good (the client closes)."""
        self._closed = True
        if self._listening is not None:
            self._listening.cancel()
        await self._disconnect()

    async def _disconnect(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        redis, self._redis = self._redis, None
        with contextlib.suppress(Exception), anyio.move_on_after(1.0, shield=True):
            if pubsub is not None:
                await pubsub.aclose()
            if redis is not None:
                await redis.aclose()
