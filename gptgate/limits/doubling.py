"""Slow start's doubling that ran into a queue: the test and where the limit goes after it.

A server with a fixed number of slots and a queue (llama-server's ``--parallel``, a vLLM
``max_num_seqs``) has a goodput plateau: past its slots, more calls in flight only wait. A
doubling that crosses that edge queues the extra calls, and every call admitted at the doubled
level waits about one service time for as long as the doubling's window lasts — on the
simulator's ``plateau`` (8 slots) slow start's window at 16 admitted 26 such calls, and in a
400-call run they alone set the p99 (1.64–1.70 s against fixed 8's 1.24–1.27 s). The queue is
visible in the first few calls admitted at the new level: their latency grew with the
doubling and their goodput did not. Pure functions, so the rule is tested on numbers.
"""

from __future__ import annotations

import math

__all__ = ["doubling_queued", "served_after_doubling"]


def doubling_queued(
    d_ln_n: float, excess: float, se: float, *, exit_elasticity: float, z: float
) -> bool:
    """Whether a doubling's first calls already show it bought less than ``exit_elasticity``.

    ``d_ln_n`` is how much ``ln N`` grew, ``excess`` how much the mean ``ln R`` of the calls
    admitted since grew over the level before, ``se`` the standard error of that mean. Goodput
    ``X = N/R`` (Little) grew by ``d_ln_n − excess``, i.e. an elasticity ``1 − excess/d_ln_n``;
    on a few calls only an excess beyond ``z`` standard errors counts (the guards' rule).
    """
    if d_ln_n <= 0.0:
        return False
    return excess - z * se > (1.0 - exit_elasticity) * d_ln_n


def served_after_doubling(
    n_new: float, n_prev: float, excess: float, *, queue_tolerance: float, probe: float
) -> float:
    """The centre after a doubling ran into a queue: the calls the server serves at once, but
    never a centre whose low probe is below the level before the doubling.

    By Little's law, ``N`` calls in flight at a latency ``e**excess`` times the level before's
    are served as ``N·e**−excess`` calls at the old latency: the rest wait. As the server-queue
    guard does, the centre is that count ``× (1 + queue_tolerance)``, at most ``n_new``. But
    the first calls to complete at the doubled level are the short answers, and the latency
    normalisation (per reference answer length) inflates a short answer's queue wait: their
    served count reads low (9.6 for 16 slots, the simulator's plateau with 16), and a short
    run spent its goodput climbing back (78–87% of fixed 16 in 400 calls). The level before
    served all it was given, so the centre is at least ``n_prev / (1 − probe)``: probing's
    low side on that level (8 → 8.7, probing 8 and 9 — not 7, one slot short of the edge).
    """
    served = n_new * math.exp(-excess)
    return min(max(served * (1.0 + queue_tolerance), n_prev / (1.0 - probe)), n_new)
