"""The hedge race (gptgate/hedge.py): one attempt raced against at most one duplicate.

The call runner (gptgate/calls.py) hands the race what it needs through :class:`HedgeRace`:
how to send one attempt, the clock, the router (where a duplicate may go), and the gateway's
hedge budgets and per-backend progress (when a duplicate is due, gptgate/hedge_timing.py).
The race itself only decides who runs, who wins and what the call is billed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio

from .clock import Clock
from .errors import GateError
from .hedge import HedgeBudget, HedgePolicy, uses_tools
from .hedge_timing import REPLACEMENTS, Progress, await_both_lost, await_hedge_room
from .results import ChatResult
from .routing import Router

if TYPE_CHECKING:
    from .calls import CallSpec, CallState

_T = TypeVar("_T")

__all__ = ["AttemptSender", "HedgeRace"]

_HEDGE_PRIORITY = 1_000_000


def _ahead_of_the_queue(spec: CallSpec) -> CallSpec:
    return replace(spec, priority=spec.priority + _HEDGE_PRIORITY)


class AttemptSender(Protocol):
    """Sends one attempt of a call (``CallRunner._attempt``): its text deltas; the outcome is
    recorded on the racer's state (``result``, ``billed``, ``sent_to``...)."""

    def __call__(
        self, spec: CallSpec, state: CallState, number: int
    ) -> AsyncGenerator[str, None]: ...


def _duplicate(
    state: CallState, of: CallState, failed: set[str], spent_at: float | None
) -> CallState:
    """A duplicate's state under ``state``'s call (its span, its start), racing ``of``.
    Built as ``type(state)``: CallState lives in gptgate/calls.py, which imports this module."""
    return type(state)(
        start=state.start, span=state.span, named=True, funded_retries=True,
        failed_backends=failed, hedge=True, on_sent=anyio.Event(), hedge_spent_at=spent_at,
        hedge_of=of,
    )


@dataclass(slots=True)
class HedgeRace:
    """What the race needs from the call runner, and the hedging state the gateway shares."""

    clock: Clock
    router: Router
    send: AttemptSender
    #: per (ratio, window): the gateway's hedge budgets (gptgate/hedge.py)
    budgets: dict[tuple[float, float], HedgeBudget] = field(default_factory=dict)
    #: per backend: its requests' sends and first tokens or answers (hedge timing)
    _progress: dict[str, Progress] = field(default_factory=dict)

    def budget(self, policy: HedgePolicy) -> HedgeBudget:
        key = (policy.budget_ratio, policy.window_s)
        budget = self.budgets.get(key)
        if budget is None:
            budget = self.budgets[key] = HedgeBudget(*key)
        return budget

    def progress(self, backend: str) -> Progress:
        progress = self._progress.get(backend)
        if progress is None:
            progress = self._progress[backend] = Progress()
        return progress

    def lent_from(self, spec: CallSpec, state: CallState) -> float | None:
        """When a duplicate may borrow a permit (gptgate/hedge_permit.py): once its call's
        first request is lost; None for any other attempt."""
        first, policy = state.hedge_of, spec.hedge
        if first is None or first.sent_to is None or policy is None:
            return None
        if first.hedge:  # it replaces a lost duplicate: the call's request is lost too
            return self.clock.now()
        return self.progress(first.sent_to.name).lend_at(
            first.sent_at, self.clock.now(), policy.quantile, policy.min_samples, spec.stream
        )

    # -- the two races: a whole answer, or a stream to its first token ---------------------

    async def hedged(
        self, spec: CallSpec, state: CallState, number: int, policy: HedgePolicy
    ) -> ChatResult:
        """One attempt of a non-visible call, raced against at most one duplicate sent once
        it has waited past its backend's normal wait: the first success wins and the other is
        cancelled (its sent request is billed as a cancelled attempt is). With every racer
        failed, the first attempt's error goes to the retry policy."""
        async def run(spec: CallSpec, racer: CallState) -> None:
            async with aclosing(self.send(spec, racer, number)) as deltas:
                async for _ in deltas:
                    pass

        sent: list[CallState] = []
        try:
            finished, errors = await self._race(spec, state, policy, run, sent)
        finally:
            self._unsent_duplicates_give_back(policy, sent)
        winner = finished[0][0] if finished else None
        self._merge_duplicate(state, sent, winner)
        if winner is None:
            raise self._race_lost(state, errors)
        assert state.result is not None
        return state.result

    async def hedged_stream(
        self, spec: CallSpec, state: CallState, number: int, policy: HedgePolicy,
        hidden: bool = False,
    ) -> AsyncGenerator[str, None]:
        """One attempt on the wire as SSE — a visible stream, or a hidden call raced the same
        way — raced, while nothing has been shown, against at most one duplicate sent once it
        has waited past its backend's normal time to first token and been overtaken.
        The first racer to produce a token wins and is the stream the caller reads; the other
        is cancelled at that moment (billed as a cancelled attempt is). The race ends at the
        first token, so a stream that has shown text is never hedged. A ``hidden`` call shows
        nothing: the racer quicker from its own send wins (``_race``'s ``patient``). With
        every racer failed before a token, the first error goes to the retry policy.

        The race runs inside one step of this generator (its task group never spans a
        ``yield``); the winner's generator, paused at its first token, is read from here."""
        racers: list[AsyncGenerator[str, None]] = []
        sent: list[CallState] = []
        winner: CallState | None = None

        async def run(
            spec: CallSpec, racer: CallState
        ) -> tuple[AsyncGenerator[str, None], str | None]:
            deltas = self.send(spec, racer, number)
            racers.append(deltas)
            try:
                return deltas, await deltas.__anext__()
            except StopAsyncIteration:
                return deltas, None  # complete without a text delta (tool calls only)

        try:
            first, errors = await self._race(spec, state, policy, run, sent, patient=hidden)
            self._unsent_duplicates_give_back(policy, sent)  # now, not when the answer ends
            if not first:
                raise self._race_lost(state, errors)
            winner, (deltas, delta) = first[0]
            if winner is not state and len(first) == 1:  # the first request showed nothing
                self._replaced(spec, state, policy, winner)
            for _, (tied, _) in first[1:]:  # a token in the same instant: still the loser
                with anyio.CancelScope(shield=True):
                    await tied.aclose()
            if delta is not None:
                state.committed = state.committed or bool(delta)  # "": nothing shown yet
                yield delta
                async for delta in deltas:
                    yield delta
        finally:
            with anyio.CancelScope(shield=True):  # the caller left, or the winner ended
                for deltas in racers:
                    await deltas.aclose()
            self._unsent_duplicates_give_back(policy, sent)
            self._merge_duplicate(state, sent, winner)

    # -- the race -------------------------------------------------------------------------

    async def _race(
        self,
        spec: CallSpec,
        state: CallState,
        policy: HedgePolicy,
        run: Callable[[CallSpec, CallState], Awaitable[_T]],
        duplicates: list[CallState],
        patient: bool = False,
    ) -> tuple[list[tuple[CallState, _T]], list[GateError]]:
        """The race both hedges run: ``run`` the first attempt, and at most one duplicate once
        it is due (gptgate/hedge_timing.py); the first racer whose ``run`` returns wins
        and the other is cancelled (``abandon()`` bills it). → the racers that finished, in
        order (two only when they finished in the same instant, or in a patient race), and the
        errors of those that failed. A duplicate sent is added to ``duplicates`` at once, so
        that a caller that is cancelled mid-race still accounts for it.

        ``patient`` (a hidden call raced to its first token): the first racer to return does
        not win outright while the other is on the wire — the other may still return until it
        has waited as long since its send, and the quicker from its own send wins (listed
        first). A request's first token foretells its pace (a slow replica or batch slows its
        decode alike), so a first attempt whose token came late, just ahead of its duplicate's,
        would finish last; what a loser decodes meanwhile is a few tokens."""
        state.on_sent = anyio.Event()
        state.sent_to = None  # a retry's: not the backend of the attempt before
        done = anyio.Event()
        finished: list[tuple[CallState, _T]] = []
        errors: list[GateError] = []
        running = 0
        #: each finished racer's time from its send to its return
        took: dict[int, float] = {}

        async with anyio.create_task_group() as group:

            async def race(racer: CallState, spec: CallSpec = spec) -> None:
                nonlocal running
                running += 1
                try:
                    value = await run(spec, racer)
                except GateError as error:
                    errors.append(error)
                    running -= 1
                    if running == 0:  # nothing left in the race: the retry policy decides
                        group.cancel_scope.cancel()
                    return
                except BaseException:  # a lost duplicate replaced, or the race over
                    running -= 1
                    raise
                finally:
                    if racer is state and racer.on_sent is not None:
                        racer.on_sent.set()  # wakes the hedger when the first ended unsent
                running -= 1
                finished.append((racer, value))
                now = self.clock.now()
                took[id(racer)] = now - racer.sent_at
                done.set()
                other = next((r for r in (state, *duplicates[-1:]) if r is not racer), None)
                if patient and running and other is not None and other.sent_to is not None:
                    wait = other.sent_at + took[id(racer)] - now
                    if wait > 0:  # the other returns meanwhile: it cancels the race itself
                        await self.clock.sleep(wait)
                group.cancel_scope.cancel()  # the loser is cancelled: abandon() bills it

            async def duplicate(racer: CallState, scope: anyio.CancelScope) -> None:
                with scope:
                    await race(racer, _ahead_of_the_queue(spec))

            async def hedger() -> None:
                racer = await self._hedge_when_due(spec, state, policy, done)
                while racer is not None and running:
                    duplicates.append(racer)
                    scope = anyio.CancelScope()
                    group.start_soon(duplicate, racer, scope)
                    if len(duplicates) > REPLACEMENTS:
                        return
                    racer = await self._replace_when_lost(spec, state, racer, policy, done)
                    if racer is not None:
                        scope.cancel()

            group.start_soon(race, state)
            group.start_soon(hedger)
        if patient:
            finished.sort(key=lambda pair: took[id(pair[0])])
        return finished, errors

    def _hedge_target(self, spec: CallSpec, state: CallState) -> set[str]:
        """What the duplicate avoids: the first attempt's backend when another eligible
        healthy one exists (the router keeps a private call on private backends), else
        nothing more — a stall is usually one replica's queue, not the whole service."""
        avoid = frozenset(state.failed_backends)
        first = state.sent_to
        if first is not None and self.router.has_alternative(
            spec.route, avoid | {first.name}, failed=avoid  # a slow first stays in its tier
        ):
            return set(avoid | {first.name})
        return set(avoid)

    async def _hedge_when_due(
        self, spec: CallSpec, state: CallState, policy: HedgePolicy, done: anyio.Event
    ) -> CallState | None:
        """Wait for the first attempt's send, then until it has waited past its backend's
        normal wait — of first tokens for a call on the wire as SSE (raced to its first
        token), else of whole answers — and been overtaken (gptgate/hedge_timing.py): a
        duplicate's state when one may go (no tools unless allowed, within the budget)."""
        assert state.on_sent is not None
        await state.on_sent.wait()
        first = state.sent_to
        if done.is_set() or first is None:
            return None
        # counted when sent, not when queued: a job's calls queued at once would otherwise
        # have left the window by the time its tail (the calls worth hedging) runs
        budget = self.budget(policy)
        budget.record_call(self.clock.now())
        if uses_tools(spec.params) and not policy.tools:
            return None
        spent_at = await await_hedge_room(  # cancelled with the race
            self.progress(first.name), budget, state.sent_at, policy, spec.stream, self.clock,
        )
        if done.is_set():
            budget.give_back(spent_at, self.clock.now())
            return None
        return _duplicate(state, state, self._hedge_target(spec, state), spent_at)

    async def _replace_when_lost(
        self, spec: CallSpec, state: CallState, lost: CallState, policy: HedgePolicy,
        done: anyio.Event,
    ) -> CallState | None:
        """A duplicate that stalled too is replaced (gptgate/hedge_timing.py,
        ``await_both_lost``): a fresh one in its room and permit."""
        assert lost.on_sent is not None and state.sent_to is not None
        await lost.on_sent.wait()
        if lost.sent_to is None or done.is_set():
            return None
        await await_both_lost(
            self.progress(state.sent_to.name), state.sent_at,
            self.progress(lost.sent_to.name), lost.sent_at, policy, spec.stream, self.clock,
        )
        if done.is_set():
            return None
        spent_at, lost.hedge_spent_at = lost.hedge_spent_at, None
        return _duplicate(state, lost, set(lost.failed_backends), spent_at)

    def _unsent_duplicates_give_back(
        self, policy: HedgePolicy, duplicates: list[CallState]
    ) -> None:
        """A duplicate never sent (its call answered while it waited for a permit) is no
        duplicate: its room goes back to the budget, for the job's tail. Also when the caller
        left mid-race."""
        for duplicate in duplicates:
            if duplicate.sent_to is None and duplicate.hedge_spent_at is not None:
                budget = self.budget(policy)
                budget.give_back(duplicate.hedge_spent_at, self.clock.now())
                duplicate.hedge_spent_at = None

    def _replaced(
        self, spec: CallSpec, state: CallState, policy: HedgePolicy, duplicate: CallState
    ) -> None:
        """The duplicate won while the first request had shown nothing: if that request had
        waited past any normal wait by then, it was lost (a stall), not merely slow."""
        first, now = state.sent_to, self.clock.now()
        if duplicate.hedge_spent_at is None or first is None:
            return
        if self.progress(first.name).lost(
            now - state.sent_at, policy.quantile, policy.min_samples, spec.stream
        ):
            self.budget(policy).replaced(duplicate.hedge_spent_at, now)

    @staticmethod
    def _race_lost(state: CallState, errors: list[GateError]) -> GateError:
        """Every racer failed: a retry avoids every backend that failed this call, the
        duplicate's too; the first error goes to the retry policy."""
        state.failed_backends |= {e.backend for e in errors[1:] if e.backend}
        return errors[0]

    @staticmethod
    def _merge_duplicate(
        state: CallState, duplicates: list[CallState], winner: CallState | None
    ) -> None:
        """The call's accounting after a race: each duplicate (a lost one's replacements too)
        counted on its backend, its billed tokens and cost added to the call's, and the
        winner's answer as the result."""
        for duplicate in duplicates:
            if duplicate.sent_to is not None:
                duplicate.sent_to.hedges += 1
            state.billed = state.billed + duplicate.billed
            state.cost_usd += duplicate.cost_usd
        if winner is None or winner.result is None:
            return
        state.result = replace(
            winner.result, billed_usage=state.billed, cost_usd=state.cost_usd,
            attempts=state.attempts,
            queue_s=state.queue_s,  # the call's own wait: latency_s - queue_s is since its send
        )
