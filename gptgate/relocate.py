"""Moving queued calls: a call waiting in one backend's queue is not bound to it for good.

A call is routed when it arrives, by what the router could see then. Two things make that
choice wrong later, and both strand the calls still *queued* there (nothing was sent, so
moving them is free — no retry, no budget, no duplicate work):

* **the backend dies.** When its circuit opens, :meth:`Relocator.evacuate` sends its queued
  calls back to be routed again — at once, not one connection failure each;
* **the backend falls far behind its peers** (a slow CPU backend holding a share of a burst
  while the GPUs' limits grow and their queues drain). After a release,
  :meth:`Relocator.on_release` moves calls from the back of a queue to a peer where they are
  predicted to finish ``gain`` times sooner: admitted at once where the peer has room, else
  queued behind the peer's own calls. A moved call gains at least ``gain``×, so it never moves
  back (that would need the reverse gain too).

Only calls that may run on the other backend move (explicit backend, privacy, tier, backends
that already failed the call), and a call holding a prompt-cache ticket moves only when its
backend dies (its ticket is for that backend's cache). The moved call's permit comes from the
backend it moves to, so the adaptive limits see each sample where it was served.
"""

from __future__ import annotations

from dataclasses import dataclass

from .clock import Clock
from .limits import Limiter
from .routing import BackendState, Router, RouteRequest

__all__ = ["QueuedCall", "Relocator"]


@dataclass(frozen=True, slots=True)
class QueuedCall:
    """What a call tells the limiter it waits at, so that it can be moved (the waiter's tag)."""

    route: RouteRequest
    #: backends that already failed this call
    exclude: frozenset[str]
    #: holds a prompt-cache ticket for the backend it waits at: moves only if that one dies
    gated: bool


class Relocator:
    """Moves queued calls off dead backends and onto backends that would serve them sooner."""

    def __init__(
        self, router: Router, clock: Clock, *, gain: float = 2.0, interval_s: float = 0.25
    ) -> None:
        self.router = router
        self.clock = clock
        #: a call moves only if predicted to finish ``gain``× sooner where it goes
        self.gain = gain
        #: queue-to-queue rebalancing runs at most this often (a backend with room takes
        #: calls at every release)
        self.interval_s = interval_s
        self._next_rebalance = -float("inf")
        self.evacuated = 0
        self.moved = 0

    def evacuate(self, name: str) -> int:
        """``name``'s circuit opened: every call queued there that has somewhere else to go
        is routed again."""
        dead = self.router.by_name[name]

        def movable(tag: object) -> bool:
            if not isinstance(tag, QueuedCall):
                return False
            return self.router.has_alternative(tag.route, tag.exclude | {name})

        moved = dead.limiter.evict(movable)
        self.evacuated += moved
        return moved

    def on_release(self, limiter: Limiter) -> None:
        """After a release at ``limiter``: if it has room, it takes calls stuck behind its
        peers; and now and then, every queue is checked against every other."""
        states = self.router.states
        if len(states) < 2:
            return
        released = self.router.by_limiter.get(limiter)
        has_room = not limiter.queued and limiter.in_flight < limiter.current_limit
        if released is not None and has_room:
            for peer in states:
                if peer is not released and peer.limiter.queued:
                    self._move(peer, released)
        now = self.clock.now()
        if now < self._next_rebalance:
            return
        self._next_rebalance = now + self.interval_s
        queued = [s for s in states if s.limiter.queued]
        for source in queued:
            for target in states:
                if target is not source and source.limiter.queued:
                    self._move(source, target)

    def _move(self, source: BackendState, target: BackendState) -> None:
        """Move what gains ``gain``× from the back of ``source``'s queue to ``target``."""
        router = self.router
        if target.breaker.state(self.clock.now()) != "closed":
            return
        target_limiter = target.limiter
        gain = self.gain
        sent = 0

        def movable(tag: object) -> bool:
            return (
                isinstance(tag, QueuedCall)
                and not tag.gated
                and target.name not in tag.exclude
                and router.admits(tag.route, target)
            )

        def worth(tag: object, position: int) -> bool:
            nonlocal sent
            assert isinstance(tag, QueuedCall)
            room = target_limiter.current_limit - target_limiter.in_flight
            if not target_limiter.queued and room > 0:
                there = router.fresh_finish_s(target, tag.route)
            else:
                ahead = target_limiter.queued + sent
                there = router.queued_finish_s(target, tag.route, ahead)
            if gain * there >= router.queued_finish_s(source, tag.route, position):
                return False
            sent += 1
            return True

        self.moved += source.limiter.hand_over(target_limiter, movable, worth)
