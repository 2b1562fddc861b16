"""An SDK request on ``gate.http_client`` takes its place in its backend's rate budget, by
its tokens, as ``gate.chat``'s call does.

``gate.chat`` reserves one request and ``prompt + max_tokens`` tokens at the backend's pacer
(gptgate/limits/pacing.py) before it sends, corrects the budget with the response's
``x-ratelimit-*`` headers, and settles the reservation with the usage the answer reports.
The SDK path does the same with the request body the transport holds (the prompt's estimate,
gptgate/tokens.py, and ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``,
1024 without, as ``gate.chat``): :func:`wait_paced` reserves and waits, the transport hands
the response's headers to the runner's ``_observe_limits`` with the reservation's place
(:attr:`Reservation.seq`), and :meth:`Reservation.settle` gives back what the answer did
not use — once, however the request ends (a refusal or a request never sent: all of it).

Before, the reservation was one request and no tokens, and no header was read: on a
TPM-limited backend (50k TPM, 40 concurrent calls of ~2.5k tokens) the SDK met 19 429s,
in a guard or not, where ``gate.chat``'s same job met none; after a 1-s window's 429 (Azure)
the spacing still holds the requests a pause released. With ``shared=`` the tokens are
taken from the fleet's budget (gptgate/shared/pacing.py), so the SDK requests of several
processes together stay under the backend's RPM/TPM as their ``gate.chat`` calls do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .clock import Clock
from .pause_wait import wait_turn
from .routing import BackendState

if TYPE_CHECKING:
    from .shared.pacing import PaceSeq

__all__ = ["DEFAULT_OUTPUT_TOKENS", "Reservation", "request_tokens", "wait_paced"]

#: what a generative request without ``max_tokens`` reserves (as ``gate.chat``'s call)
DEFAULT_OUTPUT_TOKENS = 1024


def request_tokens(prompt: int, max_tokens: int | None, *, generative: bool) -> int:
    """The tokens a request reserves: its prompt and, for a chat or completion, the output
    it may generate (the server counts ``max_tokens`` at admission too)."""
    if not generative:
        return prompt
    return prompt + (max_tokens or DEFAULT_OUTPUT_TOKENS)


@dataclass(slots=True)
class Reservation:
    """One request's take from its backend's budget: ``tokens``, and ``seq`` — its place in
    the sequence of takes (the local pacer's, or the fleet's with ``shared=``; None: paced
    locally in a fleet), which tells a report what the server had counted."""

    state: BackendState
    tokens: int
    seq: PaceSeq | None
    settled: bool = False

    def settle(self, actual: int) -> None:
        """The request used ``actual`` tokens (0: refused, or never sent): the rest goes back
        to the budget it was taken from, as ``gate.chat`` gives it back. Once."""
        if self.settled:
            return
        self.settled = True
        state = self.state
        state.pacer.reconcile(self.tokens, actual)
        if state.fleet_pacer is not None:
            state.fleet_pacer.reconcile(self.seq, self.tokens, actual)


async def wait_paced(
    state: BackendState, clock: Clock, tokens: int, bound: float | None
) -> tuple[Reservation, float | None]:
    """Reserve one request and ``tokens`` at ``state``'s pacer (the fleet's with ``shared=``)
    and wait for the send time: (the reservation, None) once it has come; when it falls past
    ``bound`` (a clock reading; None: none), the wait left, unwaited — the reservation is
    given back then (the caller answers unsent, as a pause past the bound), and when the
    wait is cancelled."""
    fleet = state.fleet_pacer
    seq: PaceSeq | None
    if fleet is not None:
        pace, seq = await fleet.reserve(clock.now(), tokens, bound)
    else:
        pace = state.pacer.reserve(clock.now(), tokens)
        seq = state.pacer.sequence()  # its report's place (limits/pacing.py)
    reservation = Reservation(state, tokens, seq)
    try:
        left = await wait_turn(state, clock, pace, state.pacer.pauses, bound)
    except BaseException:
        reservation.settle(0)
        raise
    if left is not None:
        reservation.settle(0)
    return reservation, left
