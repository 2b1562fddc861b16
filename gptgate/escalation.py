"""Does escalating to the large tier buy anything? Learned from outcomes (docs/tiers.md).

An escalation asks the large model again for a small answer that looked failed. On a server
whose answers fill ``max_tokens`` the large model is cut exactly like the small one, and
every escalation doubles the cost for nothing (issue 31: 20 of 20 short asks). Two small
pure objects, fed by ``gptgate/tiers.py``:

* :class:`EscalationLearner` — per (rule, failure kind), whether recent escalations changed
  anything. A kind whose escalations mostly changed nothing stops being escalated; a
  probe now and then (ever rarer while they change nothing) lets it resume when the large
  tier starts paying. Before any evidence, a prior decides (``likely``).
* :class:`LargeAnswers` — how long the large model answers when nothing stops it: the prior
  for an answer cut at the call's own ``max_tokens``, which binds the large model too
  (escalating pays only if the large model finishes within that bound).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import anyio

__all__ = ["EscalationLearner", "LargeAnswers", "SmallTierLearner", "Verdict"]

#: ``escalate`` (it pays, or nothing says it does not), ``probe`` (a check while stopped),
#: ``skip`` (keep the small answer: escalating has not paid, or the prior says it would
#: not), ``spent`` (keep it: escalating pays, mostly, but the kind's waste budget is spent —
#: no evidence about this answer), ``wait`` (decide again once an escalation of the kind
#: settles: its first outcomes, or the budget they reserved, are in flight —
#: :meth:`EscalationLearner.trial_settled`)
Verdict = Literal["escalate", "probe", "skip", "spent", "wait"]
Key = tuple[str, str]


@dataclass(slots=True)
class _Budget:
    """A waste budget's credit (:class:`EscalationLearner`)."""

    credit: float


#: kinds that draw on one waste budget: an answer cut at ``length`` is one symptom, whether
#: it stopped short of the call's cap or at it — each its own budget, a server whose answers
#: are often cut wasted up to twice the budget (family draw 36: 16 of 600 calls)
_BUDGET_OF = {"length_at_cap": "length"}


@dataclass(slots=True)
class _Kind:
    #: recent escalations: True = the large answer differed (it paid), False = changed nothing
    outcomes: deque[bool]
    probe_every: int
    skipped: int = 0
    #: escalations decided and not yet observed
    pending: int = 0
    #: escalations observed, with an outcome or without (the large call failed)
    settled: int = 0
    #: the waste budget (shared by the kinds of :data:`_BUDGET_OF`), and the escalations in
    #: flight that reserved part of it (what each may waste, ``reserved`` in all)
    budget: _Budget = field(default_factory=lambda: _Budget(0.0))
    reserved: float = 0.0
    budgeted: int = 0
    #: set when an escalation of the kind settles: the answers told to ``wait`` decide again
    changed: anyio.Event | None = None


@dataclass(slots=True)
class EscalationLearner:
    """Per ``(rule, kind)``: escalate while recent escalations pay; stop when the share that
    changed nothing reaches ``stop_share`` (smoothed: one that changed nothing is 0.75, one
    paid and one not 0.5); then probe every ``probe_every`` skipped answers, the gap doubling
    (up to ``max_probe_every``) while probes change nothing — so probes that change nothing
    stay well under 1 / ``probe_every`` of the calls. A probe that pays forgets the old
    evidence: the large tier changed, escalation resumes. Until ``trial_outcomes`` of a
    kind's escalations are settled, at most ``trial_in_flight`` try it at once: a
    burst of concurrent calls that all failed the same way does not all escalate on the
    prior alone.

    And a **waste budget** per kind: a kind whose escalations pay often enough to go on
    (say half the time) still wastes the other half, and on a server whose answers are
    often cut by the call's own cap on either tier that was 67 escalations that changed
    nothing in 600 calls (11 %). So each escalation reserves what it may waste
    (:meth:`waste_bound`) from a credit that grows by ``waste_share`` per small
    answer of the rule, up to ``waste_burst``; past it the answer is kept, the escalation
    waits for credit. Probes draw on it too, and an escalation whose large call failed
    counts as waste. Escalations that bought nothing then stay under ``waste_share`` of the
    rule's calls plus ``waste_burst`` per kind of failure (``length`` cut short of the cap
    and at it share one), whatever the server; a kind that pays (empty answers: the large
    tier answers) reserves almost nothing and is never held back by another's waste."""

    window: int = 16
    stop_share: float = 2 / 3
    #: outcomes before they, not the prior, decide
    min_outcomes: int = 1
    probe_every: int = 100
    max_probe_every: int = 800
    trial_outcomes: int = 1
    #: None: no bound (every call tries on the prior until the outcomes come)
    trial_in_flight: int | None = 1
    #: while the evidence leans against escalating (as many changed nothing as paid), at
    #: most this many out at once; the others ``wait`` (None: no bound)
    leaning_in_flight: int | None = None
    #: the waste budget: a kind's escalations that changed nothing ≤ this share of its
    #: rule's small answers (:meth:`earn`), plus ``waste_burst``; None: no budget
    waste_share: float | None = 0.01
    waste_burst: float = 3.0
    #: how many outcomes a ``prior`` chance of paying weighs (:meth:`pays`)
    prior_weight: float = 2.0
    _kinds: dict[Key, _Kind] = field(default_factory=dict, init=False, repr=False)
    _budgets: dict[Key, _Budget] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_outcomes <= self.window:
            raise ValueError("window and min_outcomes must be at least 1, window the larger")
        if not 0 < self.stop_share <= 1:
            raise ValueError("stop_share must be in (0, 1]")
        if not 1 <= self.probe_every <= self.max_probe_every:
            raise ValueError("probe_every must be in [1, max_probe_every]")
        if min(self.trial_outcomes, self.trial_in_flight or 1, self.leaning_in_flight or 1) < 1:
            raise ValueError(
                "trial_outcomes, trial_in_flight and leaning_in_flight must be at least 1"
            )
        if self.waste_share is not None and not (0 < self.waste_share <= 1):
            raise ValueError("waste_share must be in (0, 1], or None")
        if self.waste_burst < 1:
            raise ValueError("waste_burst must be at least 1")

    def _kind(self, key: Key) -> _Kind:
        kind = self._kinds.get(key)
        if kind is None:
            shared = (key[0], _BUDGET_OF.get(key[1], key[1]))
            budget = self._budgets.get(shared)
            if budget is None:
                budget = self._budgets[shared] = _Budget(self.waste_burst)
            kind = self._kinds[key] = _Kind(
                deque(maxlen=self.window), self.probe_every, budget=budget
            )
        return kind

    def pays(self, key: Key, *, likely: bool, prior: float | None = None) -> bool:
        """Escalating this kind pays: by its recent escalations, else by the prior.
        ``prior``, when known: the chance that one pays by other evidence (the large
        model's share of answers that finish within the bound), weighed as
        ``prior_weight`` earlier outcomes — one escalation in vain does not outweigh it
        (family draw 1085: a kind stopped by its first escalation, whose next 18 would
        have paid 14 times)."""
        outcomes = self._kind(key).outcomes
        if len(outcomes) < self.min_outcomes:
            return likely
        unchanged = outcomes.count(False)
        if prior is not None:
            weight = self.prior_weight
            return (unchanged + weight * (1 - prior)) / (len(outcomes) + weight) < self.stop_share
        return (unchanged + 0.5) / (len(outcomes) + 1) < self.stop_share

    def waste_bound(self, key: Key) -> float:
        """What one more escalation of this kind may waste, reserved while it is out: the
        share of its recent escalations that changed nothing, counting one more that did
        ((unchanged + 1) / (n + 1): 1 before any outcome, ½ after one that paid). Not the
        mean: a server slow to answer has many escalations out on thin evidence (family
        draw 36: one that paid, then 18 out at once, 16 of them in vain)."""
        outcomes = self._kind(key).outcomes
        return min(1.0, (outcomes.count(False) + 1) / (len(outcomes) + 1))

    def earn(self, rule: str) -> None:
        """One small answer of ``rule``: each of its waste budgets grows by ``waste_share``."""
        if self.waste_share is None:
            return
        for (owner, _), budget in self._budgets.items():
            if owner == rule:
                budget.credit = min(self.waste_burst, budget.credit + self.waste_share)

    def _afford(self, kind: _Kind, expected: float) -> bool:
        """Whether the kind's waste budget has room for one more escalation (what it may
        waste); if so, that much is reserved until it settles. Per kind of failure: one
        whose escalations pay (empty answers) is never held back by another's waste."""
        if self.waste_share is None:
            return True
        if kind.budget.credit < expected:
            return False
        kind.budget.credit -= expected
        kind.reserved += expected
        kind.budgeted += 1
        return True

    def decide(
        self, key: Key, *, likely: bool, hold: bool = True, prior: float | None = None
    ) -> Verdict:
        """What to do with one small answer of this kind that looked failed. ``hold``:
        the caller can hold the answer (``wait``) while the budget is spent by escalations
        out; False (an answer at the call's own cap: an answer all the same) skips."""
        kind = self._kind(key)
        on_trial = kind.settled < self.trial_outcomes and self.trial_in_flight is not None
        if on_trial and kind.pending >= (self.trial_in_flight or 0):
            return "wait"
        expected = self.waste_bound(key)
        if not self.pays(key, likely=likely, prior=prior):
            kind.skipped += 1
            if kind.skipped < kind.probe_every or not self._afford(kind, expected):
                return "skip"  # a probe over budget: tried again at the next answer
            kind.skipped = 0
            kind.pending += 1
            return "probe"
        if (
            self.leaning_in_flight is not None
            and kind.pending >= self.leaning_in_flight
            and kind.outcomes.count(False) >= 2
            and 2 * kind.outcomes.count(False) >= len(kind.outcomes)
        ):
            return "wait"  # not yet stopped, but leaning that way: no more out on a hope
        if not self._afford(kind, expected):  # it pays, mostly; its waste is over budget
            # while escalations of the kind are out, their reservations come back as they
            # settle (all of it, when they pay): wait for that rather than keep a failure
            # the large tier is mending for its twins (family draw 1002: 2 empty answers
            # kept with six out on a 17 s large server, every escalation paying)
            return "wait" if hold and kind.budgeted else "spent"
        kind.pending += 1
        return "escalate"

    async def trial_settled(self, key: Key) -> None:
        """Until an escalation of this kind settles. An answer told to ``wait`` is held, not
        kept: an empty answer kept on a guess is a failure the large tier would have
        mended (on a draw whose large server takes 16 s a call, 6 of 7 empty answers were
        kept while the first escalation was out), and one escalated on a guess may change
        nothing. Once the trial's outcome is in, it is decided on that evidence."""
        kind = self._kind(key)
        if kind.changed is None:
            kind.changed = anyio.Event()
        await kind.changed.wait()

    def has_evidence(self, key: Key) -> bool:
        """Some escalation of this kind has an outcome (a skip is then the evidence's)."""
        return bool(self._kind(key).outcomes)

    def observe(self, key: Key, *, paid: bool | None, probe: bool) -> None:
        """One escalation's outcome: did the large answer differ from the failed small one?
        None: it brought no answer (the large call failed or was cancelled)."""
        kind = self._kind(key)
        if kind.budgeted:  # the reservation given back, the waste charged: an escalation
            # that changed nothing, or whose large call failed (it bought nothing either)
            share = kind.reserved / kind.budgeted
            kind.reserved -= share
            kind.budgeted -= 1
            credit = kind.budget.credit + share - (paid is not True)
            kind.budget.credit = min(self.waste_burst, credit)
        kind.pending = max(0, kind.pending - 1)
        kind.settled += 1
        changed, kind.changed = kind.changed, None
        if changed is not None:
            changed.set()
        if paid is None:
            return
        if probe:
            if paid:
                kind.outcomes.clear()
                kind.probe_every = self.probe_every
            else:
                kind.probe_every = min(2 * kind.probe_every, self.max_probe_every)
        kind.outcomes.append(paid)


def _small_tier_learner() -> EscalationLearner:
    return EscalationLearner(
        stop_share=0.75, min_outcomes=4, trial_in_flight=None, leaning_in_flight=2,
        waste_share=None,
    )


@dataclass(slots=True)
class SmallTierLearner:
    """Per rule: do its small answers pay, or does (nearly) every one need the large tier?

    A small model that talks past any cap, next to a large one that finishes: every bounded
    small answer is cut and escalated, and each escalation pays — so ``tier="auto"`` buys
    an answer on each tier for every call, dearer than everything-large (1.07× measured).
    When four small answers of a rule in a row (or ≥ 75 % of its last 16, smoothed: four
    of five) needed the large tier, the rule goes large at once; one of its calls in 100
    (the gap doubling to 800) still tries the small tier, and a small answer that stands
    there brings the rule back. A burst is not held back while the first answers are out:
    a ``gate.map`` of simple asks goes to the small tier whole, as it should on most
    servers. An :class:`EscalationLearner` where "escalate" means "use the small tier"."""

    learner: EscalationLearner = field(default_factory=_small_tier_learner)

    def decide(self, rule: str) -> tuple[Literal["small", "large"], bool]:
        """The tier for a call the classifier sent small, and whether it is a probe."""
        verdict = self.learner.decide((rule, "small"), likely=True)
        if verdict in ("skip", "spent", "wait"):
            return "large", False
        return "small", verdict == "probe"

    def observe(self, rule: str, *, needed_large: bool | None, probe: bool) -> None:
        """A small answer of the rule: did it need the large tier (escalated, and that
        paid)? None: nothing learned (no small answer, or the large call failed)."""
        paid = None if needed_large is None else not needed_large
        self.learner.observe((rule, "small"), paid=paid, probe=probe)


@dataclass(slots=True)
class LargeAnswers:
    """The large tier's recent answers: their length, and whether they finished on their own.

    ``share_within(bound)`` is the share that finished in fewer than ``bound`` tokens — how
    likely the large model is to finish a request the small one rambled on to ``bound``. An
    answer cut (``length``) counts as not fitting any bound: nothing says where it would
    have ended."""

    keep: int = 64
    min_answers: int = 5
    _answers: deque[tuple[int, bool]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._answers = deque(maxlen=self.keep)

    def observe(self, output_tokens: int, *, finished: bool) -> None:
        self._answers.append((output_tokens, finished))

    def share_within(self, bound: int) -> float | None:
        """None until ``min_answers`` answers were seen."""
        if len(self._answers) < self.min_answers:
            return None
        fits = sum(finished and tokens < bound for tokens, finished in self._answers)
        return fits / len(self._answers)
