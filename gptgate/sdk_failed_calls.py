"""The failed calls of SDKs on ``gate.http_client``: one a call, as ``gate.chat``'s.

An SDK retries on its own (the openai and anthropic SDKs' ``max_retries``, 2 by default), so
the gateway sees a call's requests but not which one was its last: a failed request may be
retried or may be what the SDK raises. Both SDKs say which try a request is, in
``x-stainless-retry-count`` (0: a new call, n > 0: the retry of the call's try n - 1, the
same method, path and body), and that is all this counts by — no guess of ``max_retries``
or of the SDK's backoff:

- a request that fails (an error status, no response, a cut or failed body) counts its call
  failed, at its backend — the call has failed so far;
- a retry of it (the same request, its retry count one more) takes that count back when it
  ends: the failure was not the call's end, the retry's outcome is (a success is the call's
  one ``calls_ok``, a failure its one ``calls_failed``).

So once no call is between a failure and its retry, ``calls_failed`` is exact: 3 calls
meeting a 500 with ``max_retries=1`` count 3 (their 6 requests are attempts), as 3
``gate.chat`` calls do. A request without the header (another client) is a call of its own.
A try gptgate makes itself within one request (a fallback=, a refusal sent again) ends its
request's previous outcome the same way. Inside ``@gate.guard`` the guard counts its call.

A request gptgate refuses unsent — the backend's circuit open, a pause or the retry budget
past its bound, the SDK addressing another server — fails its call as a sent one does (a
``gate.chat`` refused so is a failed call): before, the calls an open circuit turned away
during an outage were missing from ``calls_failed``. A refusal of the gateway's own dollar
budget is none of the backend's, as it is none for ``gate.chat``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING

import httpx2

from .errors import BudgetExceededError, GatewayClosedError, MisaddressedRequestError
from .ledger import Ledger
from .sdk_address import check_addressed

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = ["SDK_CALL", "SdkCall", "SdkCalls"]

#: the request extension carrying its :class:`SdkCall`
SDK_CALL = "gptgate_sdk_call"
#: the refusal of gptgate's own that is no failure of the backend's (``REFUSED_HEADER``)
_NOT_THE_BACKENDS = frozenset({"dollar-budget"})
#: failed requests remembered for a retry: past this, the oldest are taken as final (they
#: are counted already; the SDK retries within seconds, a retry-after of at most 60)
_REMEMBERED = 4096


_Key = tuple[str, str, bytes]


class SdkCall:
    """One call of an SDK: the backend its failure is counted at (None: none counted), and
    which try its latest request is (None: its client does not say, nor retries by it).
    Its key (method, path, the body's digest) is taken only when a retry can need it — a
    retry's lookup, or a failure a retry may follow — so an answered first try, the common
    case, never hashes its body (an image's megabytes included)."""

    __slots__ = ("failed_at", "key", "request", "tries")

    def __init__(self, key: _Key | None, tries: int | None, request: httpx2.Request) -> None:
        self.key = key
        self.tries = tries
        #: the request whose body the key is taken from, until it is
        self.request: httpx2.Request | None = request if key is None else None
        self.failed_at: str | None = None

    def keyed(self) -> _Key:
        """The call's key, taken from its request's body now if not yet."""
        if self.key is None:
            self.key = _key(self.request) if self.request is not None else ("", "", b"")
            self.request = None
        return self.key


def _retry_count(request: httpx2.Request) -> int | None:
    value = request.headers.get("x-stainless-retry-count")
    return int(value) if value is not None and value.isdigit() else None


def _key(request: httpx2.Request) -> _Key:
    try:
        content = request.content
    except httpx2.RequestNotRead:  # a streamed upload: only its path tells it
        content = b""
    return request.method, request.url.path, hashlib.blake2b(content, digest_size=16).digest()


class SdkCalls:
    """The calls of one gateway's SDK clients, matched to their retries."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        #: calls whose last request failed, by (key, the retry count their retry will carry)
        self._failed: OrderedDict[tuple[_Key, int], list[SdkCall]] = OrderedDict()

    def of(self, request: httpx2.Request) -> SdkCall:
        """The call ``request`` is a try of (kept in its extensions: a fallback's or a
        resent refusal's try is the same request's)."""
        call = request.extensions.get(SDK_CALL)
        if isinstance(call, SdkCall):
            return call
        count = _retry_count(request)
        key = _key(request) if count else None  # a retry: looked up by it
        call = None
        if key is not None and count is not None:
            waiting = self._failed.get((key, count))
            if waiting:
                call = waiting.pop(0)
                if not waiting:
                    del self._failed[(key, count)]
                call.tries = count
        if call is None:
            call = SdkCall(key, count, request)
        request.extensions[SDK_CALL] = call
        return call

    def ended(self, call: SdkCall, backend: str, error: BaseException | None) -> None:
        """A try of ``call`` ended at ``backend``: ``error`` None, answered (or left by its
        caller); else failed. Its previous try's failure is taken back either way."""
        # the gateway's own shutdown or budget: none of the backend's (as for gate.chat)
        ours = isinstance(error, (GatewayClosedError, BudgetExceededError))
        self._ended(call, backend, failed=error is not None and not ours)

    def refused(self, request: httpx2.Request, backend: str, refusal: str) -> None:
        """``request`` was refused unsent at ``backend`` (``refusal``: what
        ``REFUSED_HEADER`` says, or "misaddressed"): a try of its call that failed."""
        self._ended(self.of(request), backend, failed=refusal not in _NOT_THE_BACKENDS)

    def accepted(self, state: BackendState, request: httpx2.Request, *, counted: bool) -> None:
        """A request taken in at ``state``: its call found (``counted``: this gateway counts
        the call, a guard not), its address checked — a request to another server than
        ``state``'s is refused unsent (``check_addressed``), its call failed."""
        if counted:
            self.of(request)
        try:
            check_addressed(state, request)
        except MisaddressedRequestError:
            if counted:
                self.refused(request, state.name, "misaddressed")
            raise

    def _ended(self, call: SdkCall, backend: str, *, failed: bool) -> None:
        if call.failed_at is not None:
            entry = self._ledger.entries.get(call.failed_at)
            if entry is not None:
                entry.calls_failed -= 1
            call.failed_at = None
            self._forget(call)
        if not failed:
            call.request = None  # no retry follows: its body is not needed
            return
        if backend not in self._ledger.entries:
            return
        self._ledger.record_call(backend, ok=False)
        call.failed_at = backend
        if call.tries is None:  # no retry of it can be told: final
            return
        self._failed.setdefault((call.keyed(), call.tries + 1), []).append(call)
        while len(self._failed) > _REMEMBERED:
            self._failed.popitem(last=False)

    def _forget(self, call: SdkCall) -> None:
        """``call`` is waited for no more (its try after the failure ended)."""
        if call.tries is None or call.key is None:
            return
        where = (call.key, call.tries + 1)
        waiting = self._failed.get(where)
        if waiting is not None and call in waiting:
            waiting.remove(call)
            if not waiting:
                del self._failed[where]
