"""Tiered serving (gptgate/tiers.py, docs/tiers.md): the heuristic's rules, the classifier
seam and its failures, escalation and its ledger, fallback between tiers, privacy, explicit
tiers, spans and metrics, and the simulator's hard requests."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.routing import RouteRequest
from gptgate.testing import LoopClock, run_virtual, sim_backend
from gptgate.tiers import RULES, TierHeuristic, failure_reason
from tests.mockbackend import Script, backend, completion, error

ASK = [{"role": "user", "content": "What is the capital of France?"}]
SMALL_ASK: dict[str, Any] = {"max_tokens": 100}


def answer(text: str = "Paris.", finish: str = "stop", prompt: int = 10) -> httpx2.Response:
    body = completion(text, prompt=prompt)
    body["choices"][0]["finish_reason"] = finish
    return httpx2.Response(200, json=body)


def two_tiers(
    small: Script, large: Script, **options: Any
) -> gg.Gateway:
    return gg.Gateway(
        [
            backend(small, name="small", tier="small", hardware="cpu",
                    price=gg.Price(input_per_mtok=0.1, output_per_mtok=0.4)),
            backend(large, name="large", tier="large", hardware="tpu",
                    price=gg.Price(input_per_mtok=1.0, output_per_mtok=10.0)),
        ],
        max_attempts=2,
        backoff_base_s=0.01,
        backoff_cap_s=0.02,
        **options,
    )


def down(gate: gg.Gateway, name: str) -> None:
    """Open a backend's circuit (as five failures in a row would)."""
    breaker = gate.backend_state(name).breaker
    for _ in range(breaker.threshold):
        breaker.on_failure(gate.clock.now())


# -- 1. the heuristic's rules ----------------------------------------------------------------


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


RULE_CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    ("images", [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]}], SMALL_ASK),
    ("tools", _user("weather in Paris?"), {**SMALL_ASK, "tools": [{"type": "function"}]}),
    ("tools", [*_user("weather?"), {"role": "assistant", "content": None, "tool_calls": [{}]},
               {"role": "tool", "content": "12C", "tool_call_id": "1"}], SMALL_ASK),
    ("response_format", _user("name a colour"),
     {**SMALL_ASK, "response_format": {"type": "json_object"}}),
    ("no_max_tokens", _user("name a colour"), {}),
    ("long_output", _user("name a colour"), {"max_tokens": 2000}),
    ("long_output", _user("name a colour"), {"max_completion_tokens": 513}),
    ("long_prompt", _user("lorem ipsum " * 700), SMALL_ASK),
    ("long_conversation", [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
        for i in range(7)
    ], SMALL_ASK),
    ("code", _user("Why does ```x = 1``` fail?"), SMALL_ASK),
    ("code", _user("Write a python snippet that sorts a list"), SMALL_ASK),
    ("code", _user("def f(x): return x"), SMALL_ASK),
    ("reasoning", _user("Explain step by step how tides work"), SMALL_ASK),
    ("reasoning", _user("Prove that there are infinitely many primes"), SMALL_ASK),
    ("reasoning", _user("Compare Lisbon and Porto for a weekend"), SMALL_ASK),
    ("short_ask", _user("What is the capital of France?"), SMALL_ASK),
    ("short_ask",
     [{"role": "system", "content": "Be brief."}, *_user("Translate 'hello' to German")],
     {"max_tokens": 512}),
]


@pytest.mark.parametrize(("rule", "messages", "params"), RULE_CASES)
def test_each_heuristic_rule_decides_its_case(
    rule: str, messages: list[dict[str, Any]], params: dict[str, Any]
) -> None:
    tier, reason = TierHeuristic()(messages, params)
    assert reason == rule
    assert tier == ("small" if rule == "short_ask" else "large")


def test_every_rule_is_covered_and_listed_in_order() -> None:
    assert {rule for rule, _, _ in RULE_CASES} == set(RULES)
    assert RULES[-1] == "short_ask"  # the only small rule, tried last


def test_heuristic_thresholds_are_settable() -> None:
    lenient = TierHeuristic(max_output_tokens=4000, unbounded_output_large=False, max_turns=20)
    assert lenient(_user("name a colour"), {"max_tokens": 2000}) == ("small", "short_ask")
    assert lenient(_user("name a colour"), {}) == ("small", "short_ask")
    strict = TierHeuristic(max_prompt_tokens=5)
    assert strict(_user("name a colour, any colour"), SMALL_ASK) == ("large", "long_prompt")


def test_a_text_response_format_is_no_structured_output() -> None:
    params = {**SMALL_ASK, "response_format": {"type": "text"}}
    assert TierHeuristic()(ASK, params) == ("small", "short_ask")


def _result(text: str, finish: str | None = "stop") -> gg.ChatResult:
    usage = gg.Usage(input_tokens=10, output_tokens=5)
    return gg.ChatResult(
        text=text, finish_reason=finish, backend="small", hardware="cpu", model="m",
        streamed=False, attempts=1, usage=usage, billed_usage=usage, ttft_s=None,
        latency_s=0.1, queue_s=0.0, cost_usd=0.0, scenario="default", stream_decision="rule",
    )


def test_failure_reasons() -> None:
    json_ask = {"max_tokens": 100, "response_format": {"type": "json_object"}}
    assert failure_reason(_result("cut", "length"), {"max_tokens": 100}) == "length"
    assert failure_reason(_result("cut", "length"), {}) == "length"  # the small context
    # a large bound is the caller's own cap: being cut at it is no sign of a small model
    assert failure_reason(_result("cut", "length"), {"max_tokens": 4000}) is None
    assert failure_reason(_result("  \n"), {"max_tokens": 100}) == "empty"
    assert failure_reason(_result("", "tool_calls"), {"max_tokens": 100}) is None
    assert failure_reason(_result('{"a": 1'), json_ask) == "invalid_json"
    assert failure_reason(_result('{"a": 1}'), json_ask) is None
    assert failure_reason(_result("fine"), {"max_tokens": 100}) is None


# -- 2. routing by the decision --------------------------------------------------------------


async def test_auto_sends_simple_asks_small_and_hard_ones_large() -> None:
    small, large = Script(answer("Paris.")), Script(answer("big"))
    async with two_tiers(small, large) as gate:
        easy = await gate.chat(ASK, **SMALL_ASK)
        hard = await gate.chat(_user("Write a python function for quicksort"), **SMALL_ASK)
    assert (easy.backend, easy.tier, easy.tier_reason, easy.escalated) == (
        "small", "small", "short_ask", False
    )
    assert (hard.backend, hard.tier, hard.tier_reason) == ("large", "large", "code")
    assert len(small.requests) == 1 and len(large.requests) == 1


async def test_a_single_tier_gateway_decides_nothing() -> None:
    only = Script(answer())
    async with gg.Gateway([backend(only, name="only", tier="small")]) as gate:
        result = await gate.chat(ASK)  # no max_tokens: the heuristic would say large
    assert result.backend == "only" and result.tier is None and result.tier_reason is None
    assert gate.tier_stats().calls == 0


async def test_explicit_tier_is_never_moved_escalated_or_fallen_back() -> None:
    small, large = Script(answer("", "stop")), Script(answer("big"))
    async with two_tiers(small, large, max_breaker_wait_s=0.1) as gate:
        result = await gate.chat(ASK, tier="small", **SMALL_ASK)  # empty, yet kept
        assert (result.backend, result.tier, result.tier_reason) == ("small", "small", "explicit")
        assert not result.escalated and large.requests == []
        hard = await gate.chat(_user("Write python code"), tier="small", **SMALL_ASK)
        assert hard.backend == "small"  # the classifier is not asked
        down(gate, "small")
        # an explicit tier does not fall back: it waits for its circuit, within the bound
        with pytest.raises(gg.BackendError, match="circuit is open"):
            await gate.chat(ASK, tier="small", **SMALL_ASK)
    assert large.requests == []


async def test_auto_falls_back_to_the_other_tier_when_its_tier_is_down_or_missing() -> None:
    small, large = Script(answer("Paris.")), Script(answer("big"))
    async with two_tiers(small, large) as gate:
        down(gate, "small")
        result = await gate.chat(ASK, **SMALL_ASK)
        stats = gate.tier_stats().rules["short_ask"]
    # decided small, served large: labelled by the tier that answered, not a small answer
    assert (result.backend, result.tier, result.tier_reason) == ("large", "large", "short_ask")
    assert (stats.calls, stats.small, stats.escalation_rate) == (1, 0, None)
    assert small.requests == [] and len(large.requests) == 1
    # private: no private small backend at all → the private large one
    psmall, plarge = Script(answer("s")), Script(answer("L"))
    gate = gg.Gateway([
        backend(psmall, name="small", tier="small"),
        backend(plarge, name="large", tier="large", private=True),
    ])
    async with gate:
        result = await gate.chat(ASK, private=True, **SMALL_ASK)
    assert (result.backend, result.tier) == ("large", "large") and psmall.requests == []


def refused(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


async def test_auto_moves_off_a_dead_small_tier_at_once_and_at_no_retry_cost() -> None:
    """Connection refused on the only small backend, its circuit still closed (four failures
    to go): each call moves to the large tier on its next attempt, without back-off or retry
    budget (a failover, as between two backends of one tier) — before, every attempt went
    back to the dead small backend and the call failed."""
    large = Script(answer("Paris."))
    gate = two_tiers(Script(refused), large, retry_budget_ratio=0.0,
                     retry_budget_min_per_s=0.0)
    async with gate:
        results = [await gate.chat(ASK, **SMALL_ASK) for _ in range(3)]
        async with gate.stream(ASK, **SMALL_ASK) as s:
            text = "".join([part async for part in s])
        streamed = s.result
    assert [(r.backend, r.attempts, r.tier) for r in results] == [("large", 2, "large")] * 3
    assert (text, streamed.backend, streamed.tier) == ("Paris.", "large", "large")


async def test_a_failing_small_answer_moves_to_the_large_tier_on_retry() -> None:
    """A 500 from the only small backend: the retry goes to the large tier (the small one
    already failed this call), not back to the same backend."""
    small, large = Script(error(500, "overloaded")), Script(answer("Paris."))
    async with two_tiers(small, large) as gate:
        result = await gate.chat(ASK, **SMALL_ASK)
    assert (result.backend, result.attempts) == ("large", 2) and len(small.requests) == 1


def test_router_preference_is_soft_only_while_the_preferred_tier_is_down() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate = gg.Gateway([
            backend(Script(answer()), name="small", tier="small"),
            backend(Script(answer()), name="large", tier="large"),
        ], clock=clock)
        async with gate:
            router = gate.runner.router
            small, large = router.by_name["small"], router.by_name["large"]
            prefer = RouteRequest(prefer="small")
            assert [s.name for s in router.eligible(prefer)] == ["small"]
            assert router.admits(prefer, small) and not router.admits(prefer, large)
            # a call merely avoiding the small backend (a hedge) stays in the small tier while
            # it is up; one the small backend failed has the large tier to go to
            assert not router.has_alternative(prefer, frozenset({"small"}), failed=frozenset())
            assert router.has_alternative(prefer, frozenset({"small"}))
            assert router.choose(prefer, frozenset({"small"}))[0] is large
            assert router.choose(prefer)[0] is small
            down(gate, "small")
            assert router.admits(prefer, large)
            assert router.has_alternative(prefer, frozenset({"small"}))
            assert router.choose(prefer)[0] is large

    run_virtual(main)


async def test_private_calls_stay_on_private_backends_of_either_tier() -> None:
    scripts = {name: Script(answer("", "stop")) for name in ("small", "pub-large")}
    scripts["priv-large"] = Script(answer("fine"))
    gate = gg.Gateway([
        backend(scripts["small"], name="small", tier="small", private=True),
        backend(scripts["pub-large"], name="pub-large", tier="large"),
        backend(scripts["priv-large"], name="priv-large", tier="large", private=True),
    ])
    async with gate:
        result = await gate.chat(ASK, private=True, **SMALL_ASK)  # empty on small: escalated
    assert (result.backend, result.escalated) == ("priv-large", True)
    assert scripts["pub-large"].requests == []
    # with no private large backend, the small answer stays: nothing leaves the private set
    only = {name: Script(answer("", "stop")) for name in ("small", "pub-large")}
    gate = gg.Gateway([
        backend(only["small"], name="small", tier="small", private=True),
        backend(only["pub-large"], name="pub-large", tier="large"),
    ])
    async with gate:
        kept = await gate.chat(ASK, private=True, **SMALL_ASK)
        stats = gate.tier_stats().rules["short_ask"]
    assert (kept.backend, kept.escalated) == ("small", False) and only["pub-large"].requests == []
    assert (stats.escalated, stats.unescalated) == (0, 1)


# -- 3. escalation and its ledger --------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "params", "why"),
    [
        (answer("A very long answer that was cut", "length"), SMALL_ASK, "length"),
        (answer("", "stop"), SMALL_ASK, "empty"),
        (answer('{"city": "Par'), {"max_tokens": 100, "response_format": {"type": "json_object"}},
         "invalid_json"),
    ],
)
async def test_a_failed_looking_small_answer_is_asked_again_of_the_large_tier_once(
    first: httpx2.Response, params: dict[str, Any], why: str
) -> None:
    small, large = Script(first), Script(answer('{"city": "Paris"}', prompt=12))
    classify = (lambda m, p: "small")  # noqa: E731 - JSON asks would go large by default
    async with two_tiers(small, large, tier_classifier=classify) as gate:
        result = await gate.chat(ASK, **params)
        ledger = gate.ledger.entries
        stats = gate.tier_stats()
        per_backend = gate.stats()
    assert (result.backend, result.tier, result.escalated) == ("large", "large", True)
    assert result.tier_reason == "classifier"
    assert len(small.requests) == 1 and len(large.requests) == 1
    assert result.attempts == 2
    first_usage = ledger["small"].input_tokens + ledger["small"].output_tokens
    assert result.billed_usage.total_tokens == first_usage + result.usage.total_tokens
    assert result.cost_usd == pytest.approx(ledger["small"].cost_usd + ledger["large"].cost_usd)
    # the first answer is billed waste; the success is the large tier's
    assert ledger["small"].wasted_tokens == first_usage > 0
    assert ledger["small"].wasted_cost_usd == pytest.approx(ledger["small"].cost_usd)
    assert (ledger["small"].calls_ok, ledger["small"].escalated) == (0, 1)
    assert ledger["large"].calls_ok == 1 and ledger["large"].wasted_tokens == 0
    assert gate.ledger.total().calls_ok == 1
    assert per_backend["small"].escalated == 1
    rule = stats.rules["classifier"]
    assert (rule.calls, rule.small, rule.escalated, rule.escalation_rate) == (1, 1, 1, 1.0)
    assert rule.escalation_reasons == {why: 1}


async def test_escalation_happens_once_and_only_for_small_tier_answers() -> None:
    small, large = Script(answer("", "stop")), Script(answer("", "stop"))
    async with two_tiers(small, large) as gate:
        result = await gate.chat(ASK, **SMALL_ASK)  # empty on both: returned after one retry
        assert result.escalated and result.text == "" and result.backend == "large"
        hard = await gate.chat(_user("Debug my python code"), **SMALL_ASK)  # decided large
        assert not hard.escalated and hard.backend == "large"
    assert len(small.requests) == 1 and len(large.requests) == 2


async def test_a_good_small_answer_is_kept() -> None:
    small, large = Script(answer("Paris.")), Script(answer("big"))
    async with two_tiers(small, large) as gate:
        result = await gate.chat(ASK, **SMALL_ASK)
        stats = gate.tier_stats()
    assert (result.backend, result.escalated, result.attempts) == ("small", False, 1)
    assert large.requests == [] and stats.escalation_rate == 0.0
    assert gate.ledger.entries["small"].wasted_tokens == 0


async def test_accept_per_call_and_per_gateway_sync_or_async() -> None:
    small, large = Script(answer("Lyon.")), Script(answer("Paris."))
    seen: list[str] = []

    def mentions_paris(result: gg.ChatResult) -> bool:
        seen.append(result.backend)
        return "Paris" in result.text

    async def never(result: gg.ChatResult) -> bool:
        return False

    async with two_tiers(small, large, tier_accept=mentions_paris) as gate:
        by_gateway = await gate.chat(ASK, **SMALL_ASK)
        by_call = await gate.chat(ASK, accept=never, **SMALL_ASK)  # the call's wins
        kept = await gate.chat(ASK, accept=lambda r: True, **SMALL_ASK)
        reasons = gate.tier_stats().rules["short_ask"].escalation_reasons
    assert seen == ["small"]  # asked about the small answer only, never the large one
    assert (by_gateway.backend, by_gateway.escalated) == ("large", True)
    assert (by_call.backend, by_call.escalated) == ("large", True)
    assert (kept.backend, kept.escalated) == ("small", False)
    assert reasons == {"rejected": 2}


async def test_accept_that_raises_or_answers_junk_keeps_the_answer_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    small, large = Script(answer("Lyon.")), Script(answer("Paris."))

    def broken(result: gg.ChatResult) -> bool:
        raise KeyError("score")

    with caplog.at_level(logging.WARNING, logger="gptgate"):
        async with two_tiers(small, large) as gate:
            for _ in range(3):
                assert (await gate.chat(ASK, accept=broken, **SMALL_ASK)).backend == "small"
            junk = await gate.chat(ASK, accept=lambda r: "yes", **SMALL_ASK)  # type: ignore[arg-type,return-value]
    assert junk.backend == "small" and large.requests == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per distinct error
    # says what happened: the small answer was kept (no heuristic is involved)
    assert all("small answer is kept" in w and "heuristic" not in w for w in warnings), warnings


async def test_a_failed_escalation_returns_the_small_answer_unmoved_in_the_ledger() -> None:
    small, large = Script(answer("", "stop")), Script(error(400, "bad request"))
    async with two_tiers(small, large) as gate:
        result = await gate.chat(ASK, **SMALL_ASK)
        rule = gate.tier_stats().rules["short_ask"]
        entry = gate.ledger.entries["small"]
    assert (result.backend, result.escalated) == ("small", False)
    assert (rule.escalated, rule.escalation_failed) == (1, 1)
    assert (entry.calls_ok, entry.escalated, entry.wasted_tokens) == (1, 0, 0)


async def test_an_escalation_the_budget_refuses_keeps_the_answer_and_no_call_raised() -> None:
    """The large tier's price does not fit a $0.0005/h budget: the small answer is kept, and
    ``budget_status().raised`` counts no call (none raised)."""
    small, large = Script(answer("", "stop")), Script(answer("Paris."))
    budget = gg.Budget(usd_per_hour=0.0005, on_exceed="raise")
    async with two_tiers(small, large, budget=budget) as gate:
        result = await gate.chat(ASK, **SMALL_ASK)
        rule = gate.tier_stats().rules["short_ask"]
        status = gate.budget_status()
    assert (result.backend, result.escalated) == ("small", False) and large.requests == []
    assert rule.escalation_failed == 1
    assert status is not None and status.raised == 0


async def test_a_visible_stream_is_classified_but_never_escalated() -> None:
    small, large = Script(answer("", "stop")), Script(answer("Paris."))
    async with two_tiers(small, large) as gate:
        async with gate.stream(ASK, **SMALL_ASK) as stream:
            text = "".join([part async for part in stream])
        result = stream.result
        with pytest.raises(gg.BadRequestError, match="never escalated"):
            gate.stream(ASK, accept=lambda r: True, **SMALL_ASK)
    assert text == "" and (result.backend, result.tier, result.escalated) == (
        "small", "small", False
    )
    assert result.tier_reason == "short_ask" and large.requests == []


async def test_map_items_are_classified_and_escalated_each() -> None:
    small, large = Script(answer("", "stop")), Script(answer("Paris."))
    items: list[dict[str, Any]] = [
        {"messages": ASK, "max_tokens": 50}, {"messages": _user("Write python code")}
    ]
    async with two_tiers(small, large) as gate:
        results = await gate.map(items)
    assert [(r.backend, r.escalated) for r in results if isinstance(r, gg.ChatResult)] == [
        ("large", True), ("large", False)
    ]


# -- 4. the classifier seam, and its failures --------------------------------------------------


async def test_sync_async_and_reasoned_classifiers() -> None:
    seen: list[tuple[int, dict[str, Any]]] = []

    def sync(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
        seen.append((len(messages), dict(params)))
        return "large"

    async def asynchronous(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
        return "small"

    def reasoned(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Any:
        return ("small", "faq")

    for classifier, backend_name, reason in (
        (sync, "large", "classifier"),
        (asynchronous, "small", "classifier"),
        (reasoned, "small", "faq"),
    ):
        gate = two_tiers(Script(answer()), Script(answer()), tier_classifier=classifier)
        async with gate:
            result = await gate.chat(ASK, max_tokens=7, extra_headers={"x-label": "hard"})
        assert (result.backend, result.tier_reason) == (backend_name, reason)
    # the classifier sees the OpenAI parameters, not the gateway's own arguments or headers
    assert seen == [(1, {"max_tokens": 7})]


async def test_a_classifier_that_raises_or_answers_junk_falls_back_to_the_heuristic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[Any] = [ValueError("model offline"), ValueError("model offline"),
                          "medium", ("small", 3), None, RuntimeError("other")]

    def flaky(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Any:
        item = answers.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    small, large = Script(answer("Paris.")), Script(answer("big"))
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        async with two_tiers(small, large, tier_classifier=flaky) as gate:
            results = [await gate.chat(ASK, **SMALL_ASK) for _ in range(6)]
            stats = gate.tier_stats()
    assert {(r.backend, r.tier_reason) for r in results} == {("small", "fallback.short_ask")}
    assert stats.classifier_errors == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5  # the repeated "model offline" is warned once
    assert any("model offline" in w for w in warnings)


@pytest.mark.parametrize(
    ("options", "name"),
    [({"tier_classifier": "small"}, "tier_classifier"), ({"tier_accept": 3}, "tier_accept")],
)
def test_bad_tier_options_fail_at_construction(options: dict[str, Any], name: str) -> None:
    with pytest.raises(gg.BadRequestError, match=name):
        gg.Gateway([backend(Script(answer()))], **options)


async def test_bad_accept_arguments_are_typed_errors() -> None:
    small, large = Script(answer()), Script(answer())
    async with two_tiers(small, large) as gate:
        with pytest.raises(gg.BadRequestError, match="accept must be a callable"):
            await gate.chat(ASK, accept="yes", **SMALL_ASK)  # type: ignore[arg-type]
        with pytest.raises(gg.BadRequestError, match="tier='auto' calls only"):
            await gate.chat(ASK, accept=lambda r: True, tier="small", **SMALL_ASK)
        with pytest.raises(gg.BadRequestError, match="tier='auto' calls only"):
            await gate.chat(ASK, accept=lambda r: True, backend="small", **SMALL_ASK)
    assert small.requests == [] and large.requests == []
    # ``accept`` is the gateway's, never an OpenAI parameter sent to the server
    assert all("accept" not in body for body in small.bodies + large.bodies)


# -- 5. telemetry ----------------------------------------------------------------------------


async def test_spans_and_metrics_show_the_decision_and_the_escalation() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    small, large = Script(answer("", "stop")), Script(answer("Paris."))
    async with two_tiers(
        small, large, tracer_provider=tracer_provider, meter_provider=meter_provider
    ) as gate:
        await gate.chat(ASK, **SMALL_ASK)  # escalated
        await gate.chat(_user("Write python code"), **SMALL_ASK)  # large by rule
        await gate.chat(ASK, tier="large", **SMALL_ASK)  # explicit
    spans = exporter.get_finished_spans()
    calls = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.INTERNAL]
    attempts = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.CLIENT]

    def tiers(attributes: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (a.get("gptgate.tier"), a.get("gptgate.tier_reason"), a.get("gptgate.escalated"))
            for a in attributes
        ]

    expected = [
        ("small", "short_ask", False),
        ("large", "short_ask", True),
        ("large", "code", False),
        ("large", "explicit", None),
    ]
    # the escalated call is one call span (its outcome: large, escalated) over both attempts
    # (tests/test_tier_escalation_span.py)
    assert tiers(calls) == expected[1:] and tiers(attempts) == expected
    assert [a.get("gptgate.backend") for a in attempts] == ["small", "large", "large", "large"]
    assert calls[0]["gptgate.escalation_reason"] == "empty"
    points: dict[tuple[Any, ...], int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "gptgate.client.tier.calls":
                    for point in metric.data.data_points:
                        a = point.attributes or {}
                        key = (a["gptgate.tier"], a["gptgate.tier_reason"], a["gptgate.escalated"])
                        points[key] = int(point.value)  # type: ignore[union-attr]
    assert points == {("small", "short_ask", True): 1, ("large", "code", False): 1}


# -- 6. the simulator's hard requests ---------------------------------------------------------


def test_the_small_simulated_model_fails_hard_requests_deterministically() -> None:
    async def run(profile: str, seed: int) -> list[tuple[str | None, str, bool]]:
        clock = LoopClock()
        sim, _ = sim_backend(profile, name="sim", clock=clock, seed=seed, timeout=600.0)
        out: list[tuple[str | None, str, bool]] = []
        async with gg.Gateway([sim], clock=clock) as gate:
            for i in range(40):
                params: dict[str, Any] = {"max_tokens": 2500}
                if i % 4 in (0, 1):
                    params["response_format"] = {"type": "json_object"}
                difficulty = "hard" if i % 2 else "simple"
                r = await gate.chat(
                    _user(f"question {i}"), extra_headers={"x-sim-difficulty": difficulty},
                    **params,
                )
                failed = failure_reason(r, params, small_output_tokens=2500) is not None
                out.append((r.finish_reason, r.text, failed))
        return out

    small = run_virtual(run, "cpu", 5)
    assert small == run_virtual(run, "cpu", 5)  # the same per seed
    simple = small[0::2]
    hard = small[1::2]
    assert not any(failed for _, _, failed in simple)  # simple ones look fine
    assert all(isinstance(json.loads(text), dict) for _, text, _ in simple[0::2])  # JSON asks
    visible = sum(failed for _, _, failed in hard)
    assert visible >= 15  # most hard failures show (length, empty, bad JSON); silent ones do not
    large = run_virtual(run, "tpu", 5)
    assert not any(failed for _, _, failed in large)  # the large model answers them all


async def test_a_call_too_long_for_the_small_tier_goes_large_whatever_the_classifier() -> None:
    small, large = Script(answer()), Script(answer())
    gate = gg.Gateway([
        backend(small, name="small", tier="small", context_tokens=1000),
        backend(large, name="large", tier="large"),
    ], tier_classifier=lambda m, p: "small")
    async with gate:
        result = await gate.chat(_user("lorem ipsum " * 1000), max_tokens=100)  # ~3,000 tokens
    assert (result.backend, result.tier) == ("large", "large") and small.requests == []
