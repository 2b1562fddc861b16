"""The response cache's shared store: answers in a fleet's Redis (``ResponseCache(shared=)``).

The same outage rules as the fleet's (gptgate/shared/fleet.py): every operation is bounded by
``op_budget_s``; one that fails, or stays slower than the budget when asked again, is an outage
— one warning, and for the next ``retry_s`` this process asks Redis nothing (its own memory
answers: a miss costs a call, never an error). One late reply, or an event loop too busy to
read it (gptgate/shared/loop_budget.py), is asked again: on a loaded machine a single overrun
had put a fleet's cache into a 5 s outage (each process sent what the other was sending). The
budget starts once the operation holds one of the process's connections: waiting for one,
behind the process's own burst of lookups, is no sign of a slow Redis (a ``gather`` of 200
identical calls had declared an idle loopback Redis down and sent each request three times),
and neither is opening that connection (:meth:`RedisAnswers._opened`).
``Shared(required=True)`` fails the gateway's start when Redis cannot be reached. The URL's
password never reaches a log or an error (``Shared.mask``).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from .errors import SharedUnreachableError
from .shared.loop_budget import BUSY_OUTAGE_S, LoopBusy, op_budget
from .shared.needs_asyncio import require_asyncio

if TYPE_CHECKING:
    from .shared import Shared

__all__ = ["RedisAnswers"]

_log = logging.getLogger("gptgate")

#: connections one process's cache opens at most: lookups beyond them wait their turn (a few
#: round trips of a fraction of a millisecond each), not a socket per call in a burst
POOL_CONNECTIONS = 16

#: round trips of opening a connection (TCP, TLS, AUTH or HELLO, two CLIENT SETINFO), each
#: allowed ``op_budget_s``
OPENING_ROUND_TRIPS = 5

#: extend a claim's lease, or drop the claim — only while it is still this claimant's: a lease
#: that lapsed may have been claimed by another process since
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
    "return 0"
)


class RedisAnswers:
    """Cached answers under ``{namespace}:rc:{key}``, with a TTL of their own in Redis."""

    def __init__(self, shared: Shared, *, ttl_s: float, retry_s: float = 5.0) -> None:
        self.shared = shared
        self.ttl_ms = max(1, math.ceil(ttl_s * 1000))
        self.retry_s = retry_s
        #: operations that failed or overran (``ResponseCacheStatistics.shared_errors``)
        self.errors = 0
        self._redis: Any = None
        self._pid = os.getpid()
        self._down_until = -math.inf
        #: closed with its gateway: an operation still running (a claim's renewal) opens no
        #: client again, which nothing would close (``start`` opens it again)
        self._closed = False
        self._errors: tuple[type[BaseException], ...] = (OSError, TimeoutError)
        #: per request key this process leads: the token its claim holds in Redis
        self._tokens: dict[str, bytes] = {}
        #: one per pooled connection: an operation waits here, outside its budget
        self._turns = anyio.Semaphore(POOL_CONNECTIONS)

    def _client(self) -> Any:
        if self._pid != os.getpid():  # a forked child: the parent's sockets and loop are not ours
            self._redis, self._pid = None, os.getpid()
            self._down_until = -math.inf
            self._tokens = {}
        if self._redis is None:
            # only with shared=: an optional extra
            from redis.asyncio import BlockingConnectionPool, Redis
            from redis.exceptions import RedisError

            backstop = max(1.0, 10 * self.shared.op_budget_s)
            self._errors = (RedisError, OSError, TimeoutError)
            # a lookup past the pool's last connection waits for one (within its budget):
            # redis-py's default pool raised MaxConnectionsError past 100 at once — an outage
            # in a gate.map burst, after which the process paid for every answer itself
            pool = BlockingConnectionPool.from_url(
                self.shared.url, max_connections=POOL_CONNECTIONS, timeout=backstop,
                socket_timeout=backstop, socket_connect_timeout=backstop,
                health_check_interval=0,
            )
            self._redis = Redis.from_pool(pool)
            self._turns = anyio.Semaphore(POOL_CONNECTIONS)  # this loop's, this process's
        return self._redis

    def key(self, key: str) -> str:
        return f"{self.shared.namespace}:rc:{key}"

    @property
    def up(self) -> bool:
        return time.monotonic() >= self._down_until

    async def start(self) -> None:
        """Reach Redis once: ``required=True`` fails the start without it; otherwise an
        unreachable Redis is an outage from the start; under trio a GateError (redis-py's
        client is asyncio's)."""
        require_asyncio("ResponseCache(shared=...)")
        self._closed = False
        try:
            await self._op(lambda: self._client().ping())
        except SharedUnreachableError:
            if self.shared.required:
                raise

    async def get(self, key: str) -> bytes | None:
        if not self.up:
            return None
        try:
            value = await self._op(lambda: self._client().get(self.key(key)))
        except SharedUnreachableError:
            return None
        return value if isinstance(value, bytes) else None

    async def get_aged(self, key: str) -> tuple[bytes, float | None] | None:
        """An answer and the seconds left of its TTL in Redis (None: no expiry set): a
        process that copies it into its memory keeps it no longer than Redis does."""
        if not self.up:
            return None

        async def both() -> Any:
            pipe = self._client().pipeline(transaction=False)
            pipe.get(self.key(key))
            pipe.pttl(self.key(key))
            return await pipe.execute()

        try:
            value, left_ms = await self._op(both)
        except SharedUnreachableError:
            return None
        if not isinstance(value, bytes):
            return None
        left = left_ms / 1000 if isinstance(left_ms, int) and left_ms >= 0 else None
        return value, left

    async def put(self, key: str, data: bytes) -> None:
        if not self.up:
            return
        try:
            await self._op(lambda: self._client().set(self.key(key), data, px=self.ttl_ms))
        except SharedUnreachableError:
            return

    def flight_key(self, key: str) -> str:
        return f"{self.shared.namespace}:rcf:{key}"

    @property
    def lease_ms(self) -> int:
        return max(1, math.ceil(self.shared.lease_s * 1000))

    async def claim(self, key: str) -> bool:
        """Lead this request fleet-wide for ``lease_s``, renewed while the call runs
        (:meth:`renew`): a process that dies holding it keeps the others waiting no longer.
        Redis away: this process leads (as alone)."""
        if not self.up:
            return True
        token, name, tries = secrets.token_hex(8).encode(), self.flight_key(key), 0

        async def set_nx() -> bool:
            # a try whose reply came late may have set it: then the claim found is our own
            nonlocal tries
            tries += 1
            client = self._client()
            if await client.set(name, token, nx=True, px=self.lease_ms):
                return True
            return tries > 1 and await client.get(name) == token

        try:
            # shielded once sent: a caller cancelled before the reply was read had set a
            # claim it never knew of, so nothing released it (a cancelled gate.map left 13)
            claimed = bool(await self._op(set_nx, shielded=True))
        except SharedUnreachableError:
            return True
        if claimed:
            self._tokens[key] = token
        return claimed

    async def renew(self, key: str) -> None:
        """Extend this process's claim by another ``lease_s`` (its call is still running)."""
        token = self._tokens.get(key)
        if token is None or not self.up:
            return
        try:
            await self._op(
                lambda: self._client().eval(_RENEW, 1, self.flight_key(key), token, self.lease_ms)
            )
        except SharedUnreachableError:
            return

    async def release(self, key: str) -> None:
        """Drop this process's claim (never another's that took over a lapsed lease)."""
        token = self._tokens.pop(key, None)
        if token is None or not self.up:
            return
        try:
            await self._op(lambda: self._client().eval(_RELEASE, 1, self.flight_key(key), token))
        except SharedUnreachableError:
            return

    async def _op(self, operation: Callable[[], Awaitable[Any]], *, shielded: bool = False) -> Any:
        """``operation()`` within ``op_budget_s``, asked again after one late reply (and for
        up to ``BUSY_OUTAGE_S`` while the event loop is what was late); else an outage. It
        first waits for a connection of its own, outside the budget (an outage declared
        meanwhile ends the wait: Redis is not asked). ``shielded``: once it has its connection,
        a cancellation waits for its outcome (within the budget)."""
        if self._closed:
            raise self._unreachable()
        self._client()
        async with self._turns:
            if not self.up or self._closed:
                raise self._unreachable()
            await self._opened()
            with anyio.CancelScope(shield=shielded):
                return await self._timed(operation)

    async def _opened(self) -> None:
        """Have a connection open before the operation's budget starts, within a budget of
        its own: opening one takes several round trips (TCP, TLS, AUTH or HELLO, redis-py's
        two CLIENT SETINFO), each allowed what a command is. Counted in the command's budget,
        a Redis whose connections take longer to open than ``op_budget_s`` was an outage at
        every connection the cache opened — its shared store never used, while the fleet's
        client (which connects first) worked. Not the backstop: a Redis frozen mid-run held a
        call a whole second before its outage (0.25 s at most with this budget). A budget
        that fired late because the event loop was busy is asked again, as a command's is
        (gptgate/shared/loop_budget.py): a plain deadline declared an idle Redis down under
        load."""
        if self._closed:
            raise self._unreachable()
        pool = self._client().connection_pool
        busy_since = time.monotonic()
        while True:
            try:
                with op_budget(OPENING_ROUND_TRIPS * self.shared.op_budget_s):
                    # the pool hands out its last released connection first: this one, open
                    await pool.release(await _connection(pool))
                return
            except LoopBusy as error:
                if time.monotonic() - busy_since < BUSY_OUTAGE_S:
                    continue
                failure: BaseException = error
            except self._errors as error:
                failure = error
            self._down(failure)
            raise self._unreachable() from None

    async def _timed(self, operation: Callable[[], Awaitable[Any]]) -> Any:
        slow, busy_since = 0, time.monotonic()
        while True:
            try:
                with op_budget(self.shared.op_budget_s):
                    return await operation()
            except LoopBusy as error:
                if time.monotonic() - busy_since < BUSY_OUTAGE_S:
                    # its connection was dropped: the next one opens outside the budget too
                    # (inside it, on the same busy loop, the retry overran again: an outage)
                    await self._opened()
                    continue
                failure: BaseException = error
            except TimeoutError as error:
                slow += 1
                if slow < 2:
                    continue
                failure = error
            except self._errors as error:
                failure = error
            break
        self._down(failure)
        raise self._unreachable() from None

    def _unreachable(self) -> SharedUnreachableError:
        return SharedUnreachableError(
            f"response cache: shared state {self.shared.display_url} unreachable",
            url=self.shared.display_url,
        )

    def _down(self, error: BaseException) -> None:
        self.errors += 1
        if self.up:  # one warning per outage
            _log.warning(
                "response cache: Redis %s unreachable (%s); answers are cached in this "
                "process only for the next %.0f s", self.shared.display_url,
                _why(self.shared, error), self.retry_s,
            )
        self._down_until = time.monotonic() + self.retry_s

    async def aclose(self) -> None:
        self._closed = True
        if self._redis is not None:
            redis, self._redis = self._redis, None
            with anyio.CancelScope(shield=True):
                await redis.aclose()


def _connection(pool: Any) -> Awaitable[Any]:
    """An open connection of ``pool``: redis-py before 5.3 wants a command's name, later ones
    warn at one."""
    try:
        return pool.get_connection()  # type: ignore[no-any-return]
    except TypeError:
        return pool.get_connection("PING")  # type: ignore[no-any-return]


def _why(shared: Shared, error: BaseException) -> str:
    """An error as the warning shows it: its type, and its text (the password masked) if any
    — a Redis that does not answer raises a bare TimeoutError."""
    text = shared.mask(str(error))
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
