"""The real bill of an answer read to its end after its attempt gave up on it.

With ``Backend(abandoned_answers="finish")`` gptgate does not hang up on a non-streamed answer
when the attempt times out or the caller cancels: it reads it to its end in the background
(gptgate/calls.py, ``CallAttempt._read_in_background``; for an SDK's request on
``gate.http_client``, gptgate/sdk_client.py). The attempt's failure is booked at
once, as an estimate (the prompt and what the elapsed time says was generated); once the
answer has arrived its usage is known, and the booking is set right — whichever of the two
comes second does it. A hosted API bills the whole answer; the estimate did not.

The attempt's ``gen_ai.client.token.usage`` points wait for the same moment
(:meth:`LateAnswer.tokens`): recorded once, at what the ledger holds for the attempt in the end
— the real usage, or the estimate when no answer comes — so the metric equals the ledger (a
histogram cannot take back a point already recorded).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from .errors import GatewayClosedError

if TYPE_CHECKING:
    import httpx2

    from .ledger import Ledger
    from .limits import Permit
    from .results import Usage

__all__ = ["LateAnswer", "Spawn", "read_to_its_end"]

#: runs a task in the gateway's task group; False when the gateway is closing
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]


class LateAnswer:
    """One attempt's booking and its answer's real usage, reconciled once both are known."""

    __slots__ = (
        "_actual", "_booked", "_final", "_ledger", "_read_ended", "_record_tokens", "_recorded",
        "_settled", "backend", "gave_up",
    )

    def __init__(self, ledger: Ledger, backend: str) -> None:
        self._ledger = ledger
        self.backend = backend
        #: the attempt stopped waiting (a timeout, a cancelled call): the answer is late
        self.gave_up = False
        self._booked: tuple[Usage | None, bool] = (None, False)
        self._recorded = False
        self._actual: Usage | None = None
        self._settled = False
        #: the background read ended (with or without an answer)
        self._read_ended = False
        #: what the ledger holds for the attempt once settled (None: nothing)
        self._final: Usage | None = None
        self._record_tokens: Callable[[Usage], None] | None = None

    def recorded(self, usage: Usage | None, *, uncertain: bool) -> None:
        """The attempt's failure was booked: ``usage`` (None: nothing was). Ignored unless
        the attempt gave up waiting (else it got its answer and nothing is late)."""
        if not self.gave_up:
            return
        self._recorded = True
        self._booked = (usage, uncertain)
        self._settle()

    def answered(self, usage: Usage) -> None:
        """The late answer arrived, billed ``usage``."""
        self._actual = usage
        self._settle()

    def read_ended(self) -> None:
        """The background read ended, answered or not (an error, a refusal, no usage): with
        no answer, the booking stands."""
        self._read_ended = True
        self._settle()

    def tokens(self, record: Callable[[Usage], None]) -> bool:
        """Leave the attempt's token points to the end of its bill: ``record`` is called once
        with what the ledger holds for it then (not at all for nothing booked). False when
        nothing is late (the attempt got its answer or was not given up): record them now."""
        if not self.gave_up:
            return False
        self._record_tokens = record
        self._flush()
        return True

    def _settle(self) -> None:
        if self._settled or not self._recorded:
            return
        booked, uncertain = self._booked
        actual = self._actual
        if actual is None:
            if not self._read_ended:
                return
            self._final = booked  # no answer came: the estimate is the bill
        elif booked is None:
            self._ledger.record_attempt(self.backend, actual, streamed=False, wasted=True)
            self._final = actual
        else:
            self._ledger.correct(self.backend, booked, actual, uncertain=uncertain)
            self._final = actual
        self._settled = True
        self._flush()

    def _flush(self) -> None:
        record, final = self._record_tokens, self._final
        if self._settled and record is not None:
            self._record_tokens = None
            if final is not None:
                record(final)


async def read_to_its_end(
    late: LateAnswer,
    send: Callable[[], Awaitable[httpx2.Response]],
    usage_of: Callable[[httpx2.Response], Usage | None],
    *,
    spawn: Spawn | None,
    permit: Permit | None,
    wait_s: float | None,
    timed_out: Callable[[], Exception],
) -> httpx2.Response | None:
    """``send`` a request for a non-streamed answer and read it to its end in the gateway's
    task group (``spawn``), waiting for it ``wait_s`` real seconds at most (None: no bound).
    Given up on — that bound, or a cancellation — the answer is still read: ``permit``
    stays taken until it has ended (``Permit.until``), and its usage (``usage_of``) sets
    ``late``'s booking right. Raises ``timed_out()`` at the bound, ``GatewayClosedError``
    when the gateway closed under it, or what ``send`` raised; None when nothing can run in
    the background (the gateway is closing): the caller sends as usual."""
    done = anyio.Event()
    got: list[httpx2.Response | BaseException] = []

    async def read() -> None:
        try:
            response = await send()
            got.append(response)
            if late.gave_up and response.status_code < 400:  # its real bill
                usage = usage_of(response)
                if usage is not None:
                    late.answered(usage)
        except Exception as error:
            got.append(error)
        finally:
            done.set()
            late.read_ended()

    if spawn is None or not spawn(read):
        return None
    if permit is not None:
        permit.until = done
    try:
        with anyio.move_on_after(wait_s):
            await done.wait()
    finally:
        late.gave_up = not got  # timed out or cancelled: the answer, when it comes, is late
    if not got:
        if done.is_set():  # cancelled there: the gateway closed its connections
            raise GatewayClosedError(
                "the gateway closed its connections under this call", backend=late.backend
            )
        raise timed_out()
    result = got[0]
    if isinstance(result, BaseException):
        raise result
    return result
