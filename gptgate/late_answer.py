"""The real bill of an answer read to its end after its attempt gave up on it.

With ``Backend(abandoned_answers="finish")`` gptgate does not hang up on a non-streamed answer
when the attempt times out or the caller cancels: it reads it to its end in the background
(gptgate/calls.py, ``CallAttempt._read_in_background``; for an SDK's request on
``gate.http_client``, gptgate/sdk_client.py). The attempt's failure is booked at
once, as an estimate (the prompt and what the elapsed time says was generated); once the
answer has arrived its usage is known, and the booking is set right — whichever of the two
comes second does it. A hosted API bills the whole answer; the estimate did not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ledger import Ledger
    from .results import Usage

__all__ = ["LateAnswer"]


class LateAnswer:
    """One attempt's booking and its answer's real usage, reconciled once both are known."""

    __slots__ = ("_actual", "_backend", "_booked", "_ledger", "_recorded", "_settled", "gave_up")

    def __init__(self, ledger: Ledger, backend: str) -> None:
        self._ledger = ledger
        self._backend = backend
        #: the attempt stopped waiting (a timeout, a cancelled call): the answer is late
        self.gave_up = False
        self._booked: tuple[Usage | None, bool] = (None, False)
        self._recorded = False
        self._actual: Usage | None = None
        self._settled = False

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

    def _settle(self) -> None:
        if self._settled or not self._recorded or self._actual is None:
            return
        self._settled = True
        booked, uncertain = self._booked
        if booked is None:
            self._ledger.record_attempt(self._backend, self._actual, streamed=False, wasted=True)
        else:
            self._ledger.correct(self._backend, booked, self._actual, uncertain=uncertain)
