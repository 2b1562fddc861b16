"""Whether a slot-cache server's slots prefill side by side, measured from its calls.

On llama.cpp's server a prefix cached in one slot is prefilled again by every other slot that
runs it. Whether that costs time depends on the server: on this build on a CPU (``-t 1``) the
slots share the compute — two cold prompts at once take twice as long (2.5 s alone, 5.1 s
each side by side), and a call's decode stalls while another slot prefills (its steps 11 ms
alone, 230 ms beside a prefill) — so a lone prefix warms one slot and widens while its hits
hold (86.6 % hits in 0.61–0.73× the plain client's time). On a GPU with compute to spare the
slots prefill at once without slowing each other, and the same warm-up and ramp cost a lone
prefix 2.25× the plain client's time on ``tests/fake_llama_slots.py`` (16 calls; 1.26× at
200), where sending it to every slot at once costs nothing but the hits the plain client
loses too.

The two show apart in what the gate already sends: a call that hits (a short prompt to process,
its answer to decode) beside another call's cold prefill. Where the slots share the compute it
waits for that prefill (on the fake, its whole rest; on the real server, its 16 tokens took
3.5 s, 0.17 s alone); where they do not, it ends in its usual time. So each call whose usage showed
a miss is a measurement: the hits admitted within its first :data:`EARLY` of its time (not in
the same burst, :data:`AFTER`: one of those may have had the compute first) that ended within
:data:`FAST` of it vote "side by side"; those that took at least :data:`SLOW` of it vote
"shared". Which calls will miss is not guessed at admission: several admitted at once take the
warm slots in an order the gate cannot see. Two votes in a row say "side by side"; one says
"shared" (the gate's behaviour before, the safe one). Where answers are long, a hit takes about
a miss's time whatever the slots do: its votes say "shared", as before.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["AFTER", "EARLY", "FAST", "SLOW", "PrefillLanes"]

#: a hit counts against a cold call when admitted within this share of the cold call's time …
EARLY = 0.3
#: … and not before this share: one sent in the same burst may have had the compute first
AFTER = 0.05
#: a hit that ended within this share of a cold call's time did not wait for its prefill
FAST = 0.25
#: a hit that took at least this share of it waited for the prefill
SLOW = 0.5
#: misses remembered per backend (hits admitted during them may end after them)
_KEEP = 8
#: hits remembered per backend (a miss ending reads those that ran beside it)
_KEEP_HITS = 64
#: votes in a row that make a backend's slots "side by side"
_AGREE = 2


@dataclass(slots=True)
class ColdCall:
    """A call of a slot-cache backend whose usage showed a miss: it prefilled its prefix."""

    admitted: float
    #: its time, admission to release
    latency: float
    fast: int = 0
    slow: int = 0
    voted: bool = False


class PrefillLanes:
    """Per backend: the calls lately ended, misses and hits, and the verdict of the votes."""

    def __init__(self) -> None:
        self._cold: dict[str, deque[ColdCall]] = {}
        #: (admitted, latency) of the hits lately ended
        self._hits: dict[str, deque[tuple[float, float]]] = {}
        self._votes: dict[str, deque[bool]] = {}

    def side_by_side(self, backend: str) -> bool:
        """Whether ``backend``'s slots were measured prefilling at once without slowing each
        other's calls (False: shared compute, or not measured yet)."""
        votes = self._votes.get(backend, ())
        return len(votes) >= _AGREE and all(votes)

    def miss_released(self, backend: str, admitted: float, now: float) -> None:
        """A call that prefilled its prefix ended: judged by the hits that ran beside it."""
        call = ColdCall(admitted=admitted, latency=max(0.0, now - admitted))
        for hit_at, latency in self._hits.get(backend, ()):
            if hit_at >= admitted and hit_at + latency <= now:
                self._judge(call, hit_at - admitted, latency)
        self._cold.setdefault(backend, deque(maxlen=_KEEP)).append(call)
        self._vote(backend, call)

    def hit_released(self, backend: str, admitted: float, now: float) -> None:
        """A call that kept its hits ended: a measurement against the cold calls it ran
        beside (those that ended before it; the others read it when they end)."""
        latency = max(0.0, now - admitted)
        self._hits.setdefault(backend, deque(maxlen=_KEEP_HITS)).append((admitted, latency))
        for call in self._cold.get(backend, ()):
            offset = admitted - call.admitted
            if 0 <= offset < call.latency:
                self._judge(call, offset, latency)
                self._vote(backend, call)

    def _judge(self, call: ColdCall, offset: float, latency: float) -> None:
        if not AFTER * call.latency <= offset <= EARLY * call.latency:
            return
        if latency <= FAST * call.latency:
            call.fast += 1
        elif latency >= SLOW * call.latency:
            call.slow += 1

    def _vote(self, backend: str, call: ColdCall) -> None:
        if call.voted or not (call.fast or call.slow):
            return
        call.voted = True
        votes = self._votes.setdefault(backend, deque(maxlen=_AGREE))
        votes.append(call.fast > call.slow)
