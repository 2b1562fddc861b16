"""Tiered serving: ``tier="auto"`` sends simple requests to the small model, hard ones to the
large one, and escalates a small answer that looks failed (docs/tiers.md).

Three parts, each replaceable:

* a **classifier** — ``(messages, params) -> "small" | "large"`` (or ``(tier, reason)``),
  sync or async. The default, :class:`TierHeuristic`, is a transparent list of rules; a
  classifier that raises or answers something else falls back to it, with one warning per
  distinct error: the user's bug never fails their traffic;
* the **router's preference** — the chosen tier while one of its eligible backends is up, the
  other tier when it has none or all are down (``RouteRequest.prefer``). ``tier="small"`` /
  ``"large"`` are never classified, moved or escalated;
* **escalation** — a small-tier answer that looks failed (:func:`failure_reason`) is asked
  again, once, of the large tier, when that can buy something (gptgate/escalation.py): an
  answer cut at the call's own ``max_tokens`` binds the large model too, and a kind of
  failure whose escalations changed nothing stops being escalated (re-probed now and then);
  a rule whose small answers all needed the large tier goes large at once (the same).
  The first answer's tokens stay in the ledger as waste and in the call's ``billed_usage``
  and ``cost_usd``.

A visible stream (``gate.stream``) is classified but never escalated: its text is shown as it
arrives, and a second answer cannot take back the first.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from opentelemetry import metrics

from .call_span_shared import shared_call_span
from .errors import BadRequestError, GateError
from .escalation import EscalationLearner, LargeAnswers, SmallTierLearner, Verdict
from .media_fit import call_media
from .media_tokens import content_media_tokens
from .results import ChatResult
from .telemetry import NAMES
from .tier_fallback import kept_for_want_of_large
from .tokens import MESSAGE_OVERHEAD_TOKENS, estimate_text_tokens, message_text

if TYPE_CHECKING:
    from .calls import CallRunner, CallSpec
    from .config import Backend

__all__ = [
    "RULES",
    "Accept",
    "RuleStats",
    "TierClassifier",
    "TierDecision",
    "TierHeuristic",
    "TierStats",
    "Tiering",
    "answer_room",
    "changed_nothing",
    "check_accept",
    "check_classifier",
    "failure_reason",
    "length_has_room",
]

log = logging.getLogger("gptgate")

TierName = Literal["small", "large"]
#: ``(messages, params) -> "small" | "large"`` or ``(tier, reason)``; may be async
TierClassifier: TypeAlias = Callable[
    [Sequence[Mapping[str, Any]], Mapping[str, Any]], Any
]
#: ``accept(result) -> bool`` (may be async): False escalates a small-tier answer
Accept: TypeAlias = Callable[[ChatResult], "bool | Awaitable[bool]"]

#: the heuristic's rules, in the order they are tried (the first that matches decides)
RULES = (
    "images",
    "tools",
    "response_format",
    "no_max_tokens",
    "long_output",
    "long_prompt",
    "long_conversation",
    "code",
    "reasoning",
    "short_ask",
)

def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: signals of code: symbols and phrases (substrings of the lower-cased text) and words
_CODE_MARKS = ("```", "=>", "#include", "def ", "();", "){", "c++", "stack trace")
_CODE_WORDS = _words(
    "python javascript typescript java rust golang sql bash html css code coding script "
    "scripts compile compiler compiled debug debugging refactor implement implementation "
    "algorithm algorithms api bug function functions traceback regex stacktrace"
)
#: signals of multi-step reasoning
_REASONING_MARKS = ("step by step", "step-by-step", "multi-step", "trade-off")
_REASONING_WORDS = _words(
    "why prove proof derive derivation analyse analyze analysis compare contrast tradeoff "
    "tradeoffs plan planning strategy strategies calculate compute solve optimise optimize "
    "evaluate justify critique reason reasoning design architecture debate"
)
#: words, for a set lookup: one pass of a simple pattern (a regex of many alternations, run
#: at every position, cost ~2 ms on a 5 KB prompt — ten times a whole call's own CPU)
_WORD = re.compile(r"[a-z]+")


@dataclass(frozen=True, slots=True)
class TierDecision:
    """Which tier a call was routed to first, and the rule (or classifier) that said so."""

    tier: TierName
    reason: str


@dataclass(frozen=True, slots=True)
class TierHeuristic:
    """The default classifier: the first matching rule of ``RULES`` decides.

    Large: a non-text part (``images``); ``tools``/``functions`` or a tool turn (``tools``);
    a ``response_format`` other than text (``response_format``); no ``max_tokens``
    (``no_max_tokens``, when ``unbounded_output_large``: nothing bounds the answer); more
    than ``max_output_tokens`` asked for (``long_output``); a prompt over
    ``max_prompt_tokens`` (``long_prompt``); more than ``max_turns`` non-system messages
    (``long_conversation``); code in the text (``code``); multi-step reasoning words
    (``reasoning``). Otherwise small (``short_ask``): a short, single-purpose ask with a
    small answer. Pass one with other thresholds as ``tier_classifier=``.

    ``media_large=False`` (a small model that takes images): media no longer decides large
    by itself; its tokens (gptgate/media_tokens.py, the dearer of OpenAI's and Anthropic's
    rules) count in the prompt's size, so a photo's ~1,600 tokens make a ``long_prompt``
    where its caption alone would be a ``short_ask``. Either way the router sends a call
    with media only to backends that take it (gptgate/media_fit.py)."""

    max_prompt_tokens: int = 1500
    max_output_tokens: int = 512
    max_turns: int = 6
    unbounded_output_large: bool = True
    media_large: bool = True

    def __call__(
        self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
    ) -> tuple[TierName, str]:
        turns = 0
        prompt_tokens = 0
        texts: list[str] = []
        for message in messages:
            if message.get("tool_calls") or message.get("function_call"):
                return "large", "tools"
            role = message.get("role")
            if role in ("tool", "function"):
                return "large", "tools"
            content = message.get("content")
            if isinstance(content, list) and call_media((message,)):
                if self.media_large:
                    return "large", "images"
                prompt_tokens += content_media_tokens(content, "both")
            if role not in ("system", "developer"):
                turns += 1
            text = message_text(message)
            prompt_tokens += MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens(text)
            texts.append(text)
        if params.get("tools") or params.get("functions"):
            return "large", "tools"
        fmt = params.get("response_format")
        if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
            return "large", "response_format"
        max_out = params.get("max_completion_tokens") or params.get("max_tokens")
        if max_out is None:
            if self.unbounded_output_large:
                return "large", "no_max_tokens"
        elif max_out > self.max_output_tokens:
            return "large", "long_output"
        if prompt_tokens > self.max_prompt_tokens:
            return "large", "long_prompt"
        if turns > self.max_turns:
            return "large", "long_conversation"
        text = "\n".join(texts).lower()
        words = set(_WORD.findall(text))
        if not _CODE_WORDS.isdisjoint(words) or any(m in text for m in _CODE_MARKS):
            return "large", "code"
        if not _REASONING_WORDS.isdisjoint(words) or any(m in text for m in _REASONING_MARKS):
            return "large", "reasoning"
        return "small", "short_ask"


def check_classifier(classifier: object) -> TierClassifier:
    """``tier_classifier=`` must be callable (a function, a :class:`TierHeuristic`)."""
    if not callable(classifier):
        raise BadRequestError(
            "tier_classifier must be a callable (messages, params) -> 'small' | 'large', "
            f"got {type(classifier).__name__}"
        )
    return classifier


def check_accept(accept: object, name: str = "accept") -> Accept | None:
    """``accept=`` is None or a callable ``(ChatResult) -> bool``."""
    if accept is None:
        return None
    if not callable(accept):
        raise BadRequestError(
            f"{name} must be a callable (result) -> bool (or None), got {type(accept).__name__}"
        )
    return accept


def _token_bound(params: Mapping[str, Any]) -> int | None:
    bound = params.get("max_completion_tokens") or params.get("max_tokens")
    return bound if isinstance(bound, int) else None


def _wants_json(params: Mapping[str, Any]) -> bool:
    fmt = params.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


def _invalid_json(result: ChatResult, params: Mapping[str, Any]) -> bool:
    if not _wants_json(params):
        return False
    try:
        json.loads(result.text)
    except ValueError:
        return True
    return False


def _called_a_tool(result: ChatResult) -> bool:
    """The answer is a tool call whatever its finish reason: OpenAI ends a named
    ``tool_choice``'s call with ``"stop"`` (so do vLLM since #25054, and some Ollama
    versions for any call) — its empty text is no empty answer."""
    choices = result.raw.get("choices") if result.raw is not None else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, Mapping) else None
    return isinstance(message, Mapping) and bool(
        message.get("tool_calls") or message.get("function_call")
    )


def failure_reason(
    result: ChatResult, params: Mapping[str, Any], small_output_tokens: int = 512
) -> str | None:
    """Why a small-tier answer looks failed, or None: ``length`` (cut at a small or unset
    ``max_tokens`` — a small bound the large model answers within, or the small model's
    context), ``empty`` (no text and no tool call), ``invalid_json`` (``response_format``
    asked for JSON). A paused turn (Anthropic's ``pause_turn``: a server tool's long turn,
    continued by sending it back) has not failed: the large tier would start the turn over,
    its searches paid again, and the paused work lost."""
    if result.finish_reason == "length":
        bound = _token_bound(params)
        if bound is None or bound <= small_output_tokens:
            return "length"
    if result.finish_reason in ("tool_calls", "function_call", "pause_turn") or _called_a_tool(
        result
    ):
        return None
    if not result.text.strip():
        return "empty"
    if _invalid_json(result, params):
        return "invalid_json"
    return None


def answer_room(backend: Backend, prompt_tokens: int) -> int | None:
    """The most tokens ``backend`` can answer after this prompt: its context window's rest
    or its own output cap, the lower (None: neither is known)."""
    caps = [backend.max_output_tokens]
    if backend.context_tokens is not None:
        caps.append(backend.context_tokens - prompt_tokens)
    known = [cap for cap in caps if cap is not None]
    return min(known) if known else None


def length_has_room(
    first: ChatResult, params: Mapping[str, Any], rooms: Sequence[int | None]
) -> bool:
    """Could the large tier answer longer than a small answer cut at ``length``? Not when
    it was cut at the call's own ``max_tokens``: that bound binds the large model too. Yes
    when it stopped short of it (or none was set: the small model's context or default cap
    was the limit) and a large backend can answer more than the small answer wrote
    (``rooms``, per large backend: :func:`answer_room`; None = unknown, taken as room)."""
    written = first.usage.output_tokens
    bound = _token_bound(params)
    if bound is not None and written >= bound:
        return False
    return any(room is None or room > written for room in rooms)


def changed_nothing(
    why: str, first: ChatResult, second: ChatResult, params: Mapping[str, Any]
) -> bool:
    """The large answer failed the way the small one did: cut at ``length`` no longer than
    it, empty again, invalid JSON again. A ``rejected`` answer is judged by the caller's
    ``accept``, which never sees a large answer: it changed nothing only if the text is the
    same."""
    if why == "length":
        return (
            second.finish_reason == "length"
            and second.usage.output_tokens <= first.usage.output_tokens
        )
    if why == "empty":
        return failure_reason(second, {}) == "empty"
    if why == "invalid_json":
        return _invalid_json(second, params)
    return second.text == first.text


@dataclass(slots=True)
class _RuleCounts:
    calls: int = 0
    small: int = 0
    escalated: int = 0
    escalation_failed: int = 0
    #: escalation wanted but no large-tier backend could take the call (none up, or private)
    unescalated: int = 0
    #: escalations whose large answer failed the same way (gptgate/escalation.py)
    no_change: int = 0
    #: failed-looking small answers kept: escalating them could not pay, or had not
    skipped: int = 0
    #: calls decided small sent to the large tier at once: the rule's small answers needed it
    sent_large: int = 0
    why: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RuleStats:
    """One rule's (or classifier's) calls under ``tier="auto"``."""

    calls: int
    #: of which answered by the small tier (a call decided small that the large tier served
    #: while the small one was down is no small answer)
    small: int
    #: small answers asked again of the large tier
    escalated: int
    #: escalations whose large-tier call failed (the small answer was returned)
    escalation_failed: int
    #: small answers that looked failed with no large-tier backend up to take them
    unescalated: int
    #: why answers were escalated: ``length``, ``empty``, ``invalid_json``, ``rejected``
    escalation_reasons: Mapping[str, int]
    #: escalations whose large answer failed the same way: cut at ``length`` no longer than
    #: the small answer, empty again, invalid JSON again (the cost doubled for nothing)
    escalated_no_change: int = 0
    #: small answers that looked failed and were kept: cut at the call's own ``max_tokens``
    #: with no sign the large model would finish within it, or of a kind whose escalations
    #: changed nothing (gptgate/escalation.py; a probe now and then is escalated)
    escalation_skipped: int = 0
    #: calls this rule decided small that went to the large tier at once: (nearly) every one
    #: of its recent small answers had needed the large tier (gptgate/escalation.py)
    sent_large: int = 0

    @property
    def escalation_rate(self) -> float | None:
        """Escalated over small-tier answers (None before any)."""
        return self.escalated / self.small if self.small else None


@dataclass(frozen=True, slots=True)
class TierStats:
    """``gate.tier_stats()``: calls, small-tier share and escalations per classifier rule."""

    rules: Mapping[str, RuleStats]
    #: calls whose classifier raised or answered junk (the heuristic decided instead)
    classifier_errors: int

    def _total(self, count: str) -> int:
        return sum(int(getattr(r, count)) for r in self.rules.values())

    @property
    def calls(self) -> int:
        return self._total("calls")

    @property
    def escalated(self) -> int:
        return self._total("escalated")

    @property
    def escalation_rate(self) -> float | None:
        small = self._total("small")
        return self.escalated / small if small else None

    @property
    def escalated_no_change(self) -> int:
        return self._total("escalated_no_change")

    @property
    def escalation_skipped(self) -> int:
        return self._total("escalation_skipped")


#: distinct classifier / accept errors remembered (each warned once); past it, no more warnings
_MAX_WARNED = 256
#: what the gateway does when the classifier fails, and when ``accept`` does
_HEURISTIC = "the call is classified by the default heuristic instead"
_KEPT = "the small answer is kept, not escalated"


def served_by(result: ChatResult, runner: CallRunner, decided: str, reason: str) -> ChatResult:
    """``result`` labelled by the tier of the backend that produced it: a call decided small
    that the large tier served (the small one down, or none private) is a large answer."""
    state = runner.router.by_name.get(result.backend)
    tier = state.backend.tier if state is not None else decided
    return dataclasses.replace(result, tier=tier, tier_reason=reason)


class Tiering:
    """The gateway's tiering: classifies ``tier="auto"`` calls, runs them, escalates."""

    def __init__(
        self,
        *,
        tiers: frozenset[str],
        classifier: TierClassifier | None = None,
        accept: Accept | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        heuristic: TierHeuristic | None = None,
    ) -> None:
        #: classification runs only where there is a choice: backends of both tiers
        self.active = {"small", "large"} <= tiers
        self.heuristic = heuristic or (
            classifier if isinstance(classifier, TierHeuristic) else TierHeuristic()
        )
        self.classifier: TierClassifier = classifier or self.heuristic
        self.accept = accept
        #: whether escalating pays, per rule and kind of failure; how the large model answers
        self.learner = EscalationLearner()
        self.large_answers = LargeAnswers()
        self.small_tier = SmallTierLearner()
        self._counts: dict[str, _RuleCounts] = {}
        self.classifier_errors = 0
        self._warned: set[tuple[str, str]] = set()
        meter = metrics.get_meter("gptgate", meter_provider=meter_provider)
        self._metric = meter.create_counter(
            NAMES["metric_tier"], unit="{call}",
            description="tier='auto' calls by classifier rule, tier chosen and escalation",
        )
        self._points: dict[tuple[str, str, bool], dict[str, Any]] = {}

    # -- classification --------------------------------------------------------------------

    async def decide(
        self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
    ) -> TierDecision:
        """The classifier's choice; the heuristic's when it raises or answers junk."""
        view = MappingProxyType(params)
        if self.classifier is self.heuristic:
            return TierDecision(*self.heuristic(messages, view))
        try:
            answer = self.classifier(messages, view)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as error:  # the user's bug: never their traffic's failure
            self._warn(
                "tier_classifier raised", type(error).__name__, str(error)[:200], _HEURISTIC
            )
            return self._fallback(messages, view)
        decision = _as_decision(answer)
        if decision is None:
            self._warn(
                "tier_classifier answered neither 'small' nor 'large'",
                type(answer).__name__, repr(answer)[:100], _HEURISTIC,
            )
            return self._fallback(messages, view)
        return decision

    def _fallback(
        self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
    ) -> TierDecision:
        self.classifier_errors += 1
        tier, rule = self.heuristic(messages, params)
        return TierDecision(tier, f"fallback.{rule}")

    def _warn(self, what: str, kind: str, detail: str, outcome: str) -> None:
        """Once per distinct error: what failed and what the gateway did instead."""
        key = (kind, detail)
        if key in self._warned or len(self._warned) >= _MAX_WARNED:
            return
        self._warned.add(key)
        log.warning("%s (%s: %s): %s", what, kind, detail, outcome)

    def applies(self, spec: CallSpec) -> bool:
        """A ``tier="auto"`` call with no explicit backend, on a gateway with both tiers."""
        return self.active and spec.route.tier == "auto" and spec.route.backend is None

    async def prepare(self, spec: CallSpec) -> tuple[CallSpec, TierDecision | None]:
        """The call routed by its tier decision (a stream's too), with the span attributes."""
        route = spec.route
        if route.tier != "auto":
            return dataclasses.replace(spec, tier_attributes=_EXPLICIT[route.tier]), None
        if not self.applies(spec):
            return spec, None
        decision = await self.decide(spec.messages, spec.params)
        return dataclasses.replace(
            spec,
            route=dataclasses.replace(route, prefer=decision.tier),
            tier_attributes=_attributes(decision, escalated=False),
        ), decision

    # -- the call, and its escalation ------------------------------------------------------

    async def run(
        self, runner: CallRunner, spec: CallSpec, accept: Accept | None = None
    ) -> ChatResult:
        """Run a non-visible call: classified, then escalated once if its small-tier answer
        looks failed. ``accept`` (the call's, else the gateway's) judges what the built-in
        checks pass."""
        spec, decision = await self.prepare(spec)
        if decision is None:
            result = await runner.run(spec)
            if spec.tier_attributes is None:
                return result
            self._observe_large(result, spec.route.tier)
            return dataclasses.replace(result, tier=spec.route.tier, tier_reason="explicit")
        # one call in its trace, however many runs its escalation takes
        with shared_call_span(runner, spec) as shared:
            spec = dataclasses.replace(spec, shared_span=shared)
            return await self._run_auto(runner, spec, decision, accept)

    async def _run_auto(
        self, runner: CallRunner, spec: CallSpec, decision: TierDecision, accept: Accept | None
    ) -> ChatResult:
        counts = self._counts.get(decision.reason)
        if counts is None:
            counts = self._counts[decision.reason] = _RuleCounts()
        counts.calls += 1
        rule = decision.reason
        tried_small = probe = False
        if decision.tier == "small":
            tier, probe = self.small_tier.decide(rule)
            tried_small = tier == "small"
            if not tried_small:  # the rule's small answers have all needed the large tier
                counts.sent_large += 1
                decision = TierDecision("large", rule)
                spec = dataclasses.replace(
                    spec, route=dataclasses.replace(spec.route, prefer="large"),
                    tier_attributes=_attributes(decision, escalated=False),
                )
        needed_large: bool | None = None  # no small answer (the small tier down, a failure)
        try:
            start = runner.clock.now()
            first = served_by(await runner.run(spec), runner, decision.tier, rule)
            if first.tier != "small":  # decided large, or the small tier was down
                self._observe_large(first, first.tier)
                self._count(decision, escalated=False)
                return first
            counts.small += 1
            self.learner.earn(rule)
            why = failure_reason(first, spec.params, self.heuristic.max_output_tokens)
            judge = accept or self.accept
            if why is None and judge is not None and not await self._accepts(judge, first):
                why = "rejected"
            if why is None:
                needed_large = False
                self._count(decision, escalated=False)
                return first
            result, needed_large = await self._escalate(
                runner, spec, decision, counts, first, why, start
            )
            return result
        finally:
            if tried_small:
                self.small_tier.observe(rule, needed_large=needed_large, probe=probe)

    def _observe_large(self, result: ChatResult, tier: str | None) -> None:
        """A large-tier answer: how long the large model answers when nothing stops it."""
        if tier == "large":
            self.large_answers.observe(
                result.usage.output_tokens,
                finished=result.finish_reason not in ("length", "pause_turn"),
            )

    def _verdict(
        self, runner: CallRunner, spec: CallSpec, rule: str, first: ChatResult, why: str
    ) -> tuple[tuple[str, str], Verdict, bool]:
        """Whether to escalate this answer, the kind it is learned under, and whether a skip
        is informed (evidence says the large tier would not help, not a mere lack of it). An
        answer cut at the call's own ``max_tokens`` (``length_at_cap``) is escalated only
        when the large model has shown it finishes within such a bound, mostly (the small
        one rambled); every kind stops when its escalations change nothing."""
        likely = informed = True
        prior: float | None = None
        kind = why
        if why == "length":
            rooms = [
                answer_room(state.backend, first.usage.input_tokens)
                for state in runner.router.by_name.values()
                if state.backend.tier == "large"
            ]
            if not length_has_room(first, spec.params, rooms):
                kind = "length_at_cap"
                share = self.large_answers.share_within(first.usage.output_tokens)
                likely = share is not None and share >= 0.5
                informed = share is not None
                prior = share
        key = (rule, kind)
        verdict = self.learner.decide(
            key, likely=likely, hold=kind != "length_at_cap", prior=prior
        )
        return key, verdict, informed or self.learner.has_evidence(key)

    def judge_of(self, accept: Accept | None) -> Callable[[ChatResult], Awaitable[bool]] | None:
        """The verdict a ``tier="auto"`` call's small answer gets (its ``accept``, else the
        gateway's), for an answer that did not come from the tiering itself: one the
        response cache serves (gptgate/response_cache_calls.py)."""
        judge = accept or self.accept
        if not self.active or judge is None:
            return None
        chosen = judge
        return lambda result: self._accepts(chosen, result)

    async def _accepts(self, judge: Accept, result: ChatResult) -> bool:
        """The user's verdict; one that raises or is not a bool keeps the answer (warned)."""
        try:
            verdict = judge(result)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as error:
            self._warn("accept raised", type(error).__name__, str(error)[:200], _KEPT)
            return True
        if not isinstance(verdict, bool):
            self._warn(
                "accept answered no bool", type(verdict).__name__, repr(verdict)[:100], _KEPT
            )
            return True
        return verdict

    async def _escalate(
        self,
        runner: CallRunner,
        spec: CallSpec,
        decision: TierDecision,
        counts: _RuleCounts,
        first: ChatResult,
        why: str,
        start: float,
    ) -> tuple[ChatResult, bool | None]:
        """Ask the large tier once, when that can pay; the answer, and whether the large
        tier was needed (None: not known). The first answer's tokens are waste in the ledger;
        with no large-tier backend up (or none private, for a private call), or when the
        large call fails, the first answer is returned as it is."""
        large = dataclasses.replace(spec.route, tier="large", prefer=None)
        if not runner.router.has_alternative(large, frozenset()):
            counts.unescalated += 1
            self._count(decision, escalated=False)
            kept_for_want_of_large()
            return first, None
        key, verdict, informed = self._verdict(runner, spec, decision.reason, first, why)
        while verdict == "wait" and key[1] != "length_at_cap":
            # the kind's first escalation is out: an empty answer, invalid JSON, one cut short
            # of its cap or rejected is no answer — held, and decided on the trial's outcome
            await self.learner.trial_settled(key)
            key, verdict, informed = self._verdict(runner, spec, decision.reason, first, why)
        if verdict in ("skip", "spent", "wait"):
            # kept: the large tier would not have helped, as far as the evidence goes — or
            # (wait) the answer stopped at the cap the call asked for, an answer all the same;
            # (spent) the waste budget kept it: that says nothing of whether it stood
            # (counted as standing, it kept a rule small whose every answer is cut: family
            # draw 1096)
            counts.skipped += 1
            self._count(decision, escalated=False)
            return first, False if verdict == "skip" and informed else None
        counts.escalated += 1
        counts.why[why] = counts.why.get(why, 0) + 1
        self._count(decision, escalated=True)
        attributes = _attributes(decision, escalated=True)
        attributes[NAMES["tier"]] = "large"
        attributes[NAMES["escalation_reason"]] = why
        paid: bool | None = None  # no answer: the learner only forgets the escalation
        try:
            second = await runner.run(
                dataclasses.replace(
                    spec, route=large, tier_attributes=attributes, escalation=True
                )
            )
            paid = not changed_nothing(why, first, second, spec.params)
        except GateError as error:
            counts.escalation_failed += 1
            log.info("escalation to the large tier failed (%s): small answer kept", error)
            kept_for_want_of_large()
            return first, None
        finally:
            self.learner.observe(key, paid=paid, probe=verdict == "probe")
        runner.ledger.record_escalated(first.backend, first.usage)
        self._observe_large(second, "large")
        counts.no_change += not paid
        return dataclasses.replace(
            second,
            attempts=first.attempts + second.attempts,
            billed_usage=first.billed_usage + second.billed_usage,
            cost_usd=first.cost_usd + second.cost_usd,
            latency_s=runner.clock.now() - start,
            queue_s=first.queue_s + second.queue_s,
            tier="large",
            tier_reason=decision.reason,
            escalated=True,
        ), paid

    def _count(self, decision: TierDecision, *, escalated: bool) -> None:
        key = (decision.tier, decision.reason, escalated)
        point = self._points.get(key)
        if point is None:
            if len(self._points) >= _MAX_WARNED:
                self._points.clear()
            point = self._points[key] = _attributes(decision, escalated=escalated)
        self._metric.add(1, point)

    def stats(self) -> TierStats:
        return TierStats(
            rules={
                rule: RuleStats(
                    calls=c.calls,
                    small=c.small,
                    escalated=c.escalated,
                    escalation_failed=c.escalation_failed,
                    unescalated=c.unescalated,
                    escalation_reasons=dict(c.why),
                    escalated_no_change=c.no_change,
                    escalation_skipped=c.skipped,
                    sent_large=c.sent_large,
                )
                for rule, c in self._counts.items()
            },
            classifier_errors=self.classifier_errors,
        )


def _as_decision(answer: object) -> TierDecision | None:
    """A classifier's answer: ``"small"``/``"large"``, or ``(tier, reason)`` with a short
    reason; anything else is junk (None)."""
    if answer == "small" or answer == "large":
        return TierDecision(answer, "classifier")
    if (
        isinstance(answer, tuple)
        and len(answer) == 2
        and answer[0] in ("small", "large")
        and isinstance(answer[1], str)
        and 0 < len(answer[1]) <= 64
    ):
        return TierDecision(answer[0], answer[1])
    return None


#: a span's attributes for an explicit tier (never changed: the SDK copies what it is given)
_EXPLICIT: dict[str, Mapping[str, Any]] = {
    tier: MappingProxyType({NAMES["tier"]: tier, NAMES["tier_reason"]: "explicit"})
    for tier in ("small", "large")
}


def _attributes(decision: TierDecision, *, escalated: bool) -> dict[str, Any]:
    return {
        NAMES["tier"]: decision.tier,
        NAMES["tier_reason"]: decision.reason,
        NAMES["escalated"]: escalated,
    }
