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

__all__ = ["EscalationLearner", "LargeAnswers", "Verdict"]

#: ``escalate`` (it pays, or nothing says it does not), ``probe`` (a check while stopped),
#: ``skip`` (keep the small answer: escalating has not paid)
Verdict = Literal["escalate", "probe", "skip"]
Key = tuple[str, str]


@dataclass(slots=True)
class _Kind:
    #: recent escalations: True = the large answer differed (it paid), False = changed nothing
    outcomes: deque[bool]
    probe_every: int
    skipped: int = 0
    #: escalations decided and not yet observed
    pending: int = 0


@dataclass(slots=True)
class EscalationLearner:
    """Per ``(rule, kind)``: escalate while recent escalations pay; stop when the share that
    changed nothing reaches ``stop_share`` (smoothed: one that changed nothing is 0.75, one
    paid and one not 0.5); then probe every ``probe_every`` skipped answers, the gap doubling
    (up to ``max_probe_every``) while probes change nothing — so probes that change nothing
    stay well under 1 / ``probe_every`` of the calls. A probe that pays forgets the old
    evidence: the large tier changed, escalation resumes. Before a kind's first outcome, one
    escalation at a time tries it: a burst of concurrent calls that all failed the same way
    does not all escalate on the prior alone."""

    window: int = 16
    stop_share: float = 2 / 3
    probe_every: int = 100
    max_probe_every: int = 800
    _kinds: dict[Key, _Kind] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be at least 1")
        if not 0 < self.stop_share <= 1:
            raise ValueError("stop_share must be in (0, 1]")
        if not 1 <= self.probe_every <= self.max_probe_every:
            raise ValueError("probe_every must be in [1, max_probe_every]")

    def _kind(self, key: Key) -> _Kind:
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = _Kind(deque(maxlen=self.window), self.probe_every)
        return kind

    def pays(self, key: Key, *, likely: bool) -> bool:
        """Escalating this kind pays: by its recent escalations, else by the prior."""
        kind = self._kind(key)
        outcomes = kind.outcomes
        if not outcomes:
            return likely and kind.pending == 0
        unchanged = outcomes.count(False)
        return (unchanged + 0.5) / (len(outcomes) + 1) < self.stop_share

    def decide(self, key: Key, *, likely: bool) -> Verdict:
        """What to do with one small answer of this kind that looked failed."""
        kind = self._kind(key)
        if not self.pays(key, likely=likely):
            kind.skipped += 1
            if kind.skipped < kind.probe_every:
                return "skip"
            kind.skipped = 0
            kind.pending += 1
            return "probe"
        kind.pending += 1
        return "escalate"

    def observe(self, key: Key, *, paid: bool | None, probe: bool) -> None:
        """One escalation's outcome: did the large answer differ from the failed small one?
        None: it brought no answer (the large call failed or was cancelled)."""
        kind = self._kind(key)
        kind.pending = max(0, kind.pending - 1)
        if paid is None:
            return
        if probe:
            if paid:
                kind.outcomes.clear()
                kind.probe_every = self.probe_every
            else:
                kind.probe_every = min(2 * kind.probe_every, self.max_probe_every)
        kind.outcomes.append(paid)


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
