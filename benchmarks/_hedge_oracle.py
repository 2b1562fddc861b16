"""The oracle hedger: the strongest hedging of stalls any client could do, as a bound.

Issue 31's hedge rule asks for p99 ≤ 0.7× unhedged on a server whose requests stall. Where
no client could get there, no hedging policy meets the rule on that draw. The stall-free
floor (the plain job with its stalls removed) is no bound: a duplicate also cuts a tail of
load jitter. The oracle is: it knows, at the send, which requests the server will stall.

* **Every request that would stall is duplicated at once** and the stalled copy dropped: the
  simulator stalls a request *before* scheduling it, so a copy cancelled then bills nothing
  (``SimEngine._straggle``). The duplicate is a fresh draw of the same body (its own stall,
  jitter and — the body's bytes being the same — the same answer length); if it would stall
  too, it is duplicated again. It needs no second slot or permit (it takes the place of the
  stalled copy at once), so a server one slot wide is no obstacle, and it bills no extra
  token: the 5% budget is not touched. It does count against a server's RPM/TPM limits
  like any request (refused there, it is not sent and the stall stays).
* **On top of that, gptgate's own hedging**, for the tail the stalls do not make (load
  jitter, long answers behind a busy batch), within the same 5% of extra billed tokens.

The oracle's p99 is the better of the two runs (the stalls foreseen, hedged and not), each
counted only when its extra billed tokens are within the rule's 5%. Where even that p99 is
above 0.7× unhedged, the rule asks for more than foreseeing every stall gives.

It is a bound for hedging *stalls*, not for every conceivable client: one that foresaw each
request's load jitter could re-draw that too. Stalls are what the rule is about ("a server
where 3% of requests stall"), and gptgate's hedging of the rest is included, so a policy
short of clairvoyance about jitter does no better than the oracle.
"""

from __future__ import annotations

import random

import hedge

from gptgate.sim import SimEngine, SimProfile, run_virtual

__all__ = ["OracleEngine", "oracle_p99"]


class OracleEngine(SimEngine):
    """A simulator whose client foresees stalls: a request that would stall is replaced, on
    arrival, by a fresh copy of itself (the duplicate an oracle hedger sends at once; the
    stalled copy is cancelled before it is scheduled, billing nothing). Needs the profile's
    ``paired_draws`` (each copy of a body its own seeded draw)."""

    #: stalled copies foreseen and replaced (the oracle's free duplicates)
    foreseen = 0

    #: copies of one request tried at most (a server that stalls every request stalls this)
    TRIES = 64

    def _paired(self, body: bytes) -> random.Random:
        rate = self.profile.straggler_rate
        for _ in range(self.TRIES):
            draws = super()._paired(body)
            before = draws.getstate()
            stalls = bool(rate) and draws.random() < rate  # SimEngine._straggle's first draw
            draws.setstate(before)
            if not stalls or not self._admit_duplicate(body):
                break
            self.foreseen += 1
        return draws

    def _admit_duplicate(self, body: bytes) -> bool:
        """The duplicate is one more request to the server's RPM/TPM limits, as any client's
        would be: refused by them, it is not sent and the stalled copy stays."""
        limiter = self._limiter
        if not limiter.enabled:
            return True
        chat = self._parse(body)
        reserve = chat.prompt_tokens + (chat.max_tokens or self.profile.tpm_default_max_tokens)
        return limiter.admit(reserve, self.clock.now()).kind is None


def oracle_p99(
    server: SimProfile, calls: int, seed: int, c: int, timeout: float, plain_billed: int
) -> float:
    """The oracle's p99 on benchmarks/hedge.py's job (``server`` with ``paired_draws``): the
    better of the stalls foreseen alone and foreseen under gptgate's hedging, each counted
    only within 5% of extra billed tokens over the plain job's ``plain_billed``."""
    runs = [
        run_virtual(hedge.job, on, calls, seed, c, 1, False, server, timeout, OracleEngine)
        for on in (False, True)
    ]
    within = [r.p99_s for r in runs if r.billed_tokens <= 1.05 * plain_billed]
    return min(within, default=runs[0].p99_s)
