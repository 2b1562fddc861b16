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

__all__ = ["EscalationLearner", "LargeAnswers", "SmallTierLearner", "Verdict"]

#: ``escalate`` (it pays, or nothing says it does not), ``probe`` (a check while stopped),
#: ``skip`` (keep the small answer: escalating has not paid, or the prior says it would
#: not), ``wait`` (keep it: the kind is on trial, its first outcomes are in flight)
Verdict = Literal["escalate", "probe", "skip", "wait"]
Key = tuple[str, str]


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
    prior alone."""

    window: int = 16
    stop_share: float = 2 / 3
    #: outcomes before they, not the prior, decide
    min_outcomes: int = 1
    probe_every: int = 100
    max_probe_every: int = 800
    trial_outcomes: int = 1
    #: None: no bound (every call tries on the prior until the outcomes come)
    trial_in_flight: int | None = 1
    _kinds: dict[Key, _Kind] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_outcomes <= self.window:
            raise ValueError("window and min_outcomes must be at least 1, window the larger")
        if not 0 < self.stop_share <= 1:
            raise ValueError("stop_share must be in (0, 1]")
        if not 1 <= self.probe_every <= self.max_probe_every:
            raise ValueError("probe_every must be in [1, max_probe_every]")
        if self.trial_outcomes < 1 or (self.trial_in_flight or 1) < 1:
            raise ValueError("trial_outcomes and trial_in_flight must be at least 1")

    def _kind(self, key: Key) -> _Kind:
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = _Kind(deque(maxlen=self.window), self.probe_every)
        return kind

    def pays(self, key: Key, *, likely: bool) -> bool:
        """Escalating this kind pays: by its recent escalations, else by the prior."""
        outcomes = self._kind(key).outcomes
        if len(outcomes) < self.min_outcomes:
            return likely
        unchanged = outcomes.count(False)
        return (unchanged + 0.5) / (len(outcomes) + 1) < self.stop_share

    def decide(self, key: Key, *, likely: bool) -> Verdict:
        """What to do with one small answer of this kind that looked failed."""
        kind = self._kind(key)
        on_trial = kind.settled < self.trial_outcomes and self.trial_in_flight is not None
        if on_trial and kind.pending >= (self.trial_in_flight or 0):
            return "wait"
        if not self.pays(key, likely=likely):
            kind.skipped += 1
            if kind.skipped < kind.probe_every:
                return "skip"
            kind.skipped = 0
            kind.pending += 1
            return "probe"
        kind.pending += 1
        return "escalate"

    def has_evidence(self, key: Key) -> bool:
        """Some escalation of this kind has an outcome (a skip is then the evidence's)."""
        return bool(self._kind(key).outcomes)

    def observe(self, key: Key, *, paid: bool | None, probe: bool) -> None:
        """One escalation's outcome: did the large answer differ from the failed small one?
        None: it brought no answer (the large call failed or was cancelled)."""
        kind = self._kind(key)
        kind.pending = max(0, kind.pending - 1)
        kind.settled += 1
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
    return EscalationLearner(stop_share=0.75, min_outcomes=4, trial_in_flight=None)


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
        if verdict in ("skip", "wait"):
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
