"""Bad input (issue 12): every malformed call is a typed error before anything is sent, and
the gateway keeps serving; every malformed configuration is a ``ValidationError`` naming the
field. Hypothesis generates the calls (derandomized, bounded, so CI sees the same examples);
each example runs on a fresh gateway over a MockTransport that records what reached it."""

from __future__ import annotations

import math
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import gptgate as gg
from gptgate.scenarios import PRESETS, BatchPolicy, RampPolicy
from gptgate.sim import FaultPlan

from .mockbackend import USER, Script, backend, gateway, ok

EXAMPLES = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: the context window of the mock backend in the call tests (tokens)
CONTEXT = 1_000


class Opaque:
    """A value json does not know."""


# -- strategies -----------------------------------------------------------------------------

_ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
_text = st.text(max_size=20)
_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
_with_surrogate = st.builds(lambda a, s, b: a + s + b, _text, _surrogate, _text)
_not_json = st.one_of(
    st.builds(Opaque),
    st.sets(st.integers(), min_size=1, max_size=3),
    st.binary(min_size=1, max_size=5),
    st.complex_numbers(allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    _with_surrogate,
)
_not_a_count = st.one_of(
    st.integers(max_value=0),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(1, 9), max_size=2),
)
_good_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]), "content": _text}
)
_bad_role = st.one_of(
    _text.filter(lambda r: r not in _ROLES),
    st.integers(),
    st.none(),
    st.lists(st.sampled_from(_ROLES), min_size=1, max_size=2),
)
_bad_content = st.one_of(
    st.integers(),
    st.floats(),
    st.binary(),
    st.dictionaries(_text, _text, max_size=2),
    st.just([]),
    st.lists(st.one_of(_text, st.integers(), st.none()), min_size=1, max_size=3),
    st.lists(st.fixed_dictionaries({"text": _text}), min_size=1, max_size=2),  # no type
    st.lists(
        st.fixed_dictionaries({"type": st.just("text"), "text": st.integers()}),
        min_size=1,
        max_size=2,
    ),
)
_BAD_MESSAGE_KINDS = (
    _text,
    st.integers(),
    st.none(),
    st.lists(_text, max_size=2),
    st.builds(lambda role: {"role": role, "content": "hi"}, _bad_role),
    st.just({"role": "user"}),
    st.just({"role": "user", "content": None}),
    st.builds(lambda content: {"role": "user", "content": content}, _bad_content),
    st.builds(lambda text: {"role": "user", "content": text}, _with_surrogate),
    st.builds(
        lambda text: {"role": "user", "content": [{"type": "text", "text": text}]},
        _with_surrogate,
    ),
    st.builds(lambda value: {"role": "user", "content": "hi", "name": value}, _not_json),
)


_NOT_A_LIST = st.one_of(
    st.none(),
    st.integers(),
    _text,
    st.binary(max_size=5),
    st.just([]),
    st.just({"role": "user", "content": "hi"}),  # one message, not a list
)


@st.composite
def _with_bad_message(draw: st.DrawFn, bad: st.SearchStrategy[object]) -> list[object]:
    """Good messages with one bad one somewhere among them."""
    messages: list[object] = draw(st.lists(_good_message, max_size=3))
    messages.insert(draw(st.integers(0, len(messages))), draw(bad))
    return messages


_BAD_PARAM_KINDS = (
    st.builds(lambda v: {"max_tokens": v}, _not_a_count),
    st.builds(lambda v: {"max_completion_tokens": v}, _not_a_count),
    st.builds(lambda v: {"max_tokens": v}, st.integers(CONTEXT + 1, 10**9)),  # > the window
    st.builds(lambda k, v: {k: v}, st.sampled_from(["temperature", "user", "metadata"]), _not_json),
    st.builds(lambda v: {"metadata": {"nested": [v]}}, _not_json),
    st.builds(lambda v: {"private": v}, st.one_of(_text, st.integers(), st.none())),
    st.builds(lambda v: {"tier": v}, _text.filter(lambda t: t not in ("small", "large", "auto"))),
    st.builds(lambda v: {"scenario": v}, _text.filter(lambda s: s not in PRESETS)),
    st.builds(lambda v: {"scenario": v}, st.one_of(st.integers(), st.lists(_text, max_size=1))),
    st.builds(
        lambda v: {"backend": v}, st.one_of(_text.filter(lambda b: b != "mock"), st.lists(_text))
    ),
    st.builds(lambda v: {"cache_key": v}, st.one_of(st.integers(), st.lists(_text, max_size=1))),
    st.builds(lambda v: {"timeout": v}, st.one_of(st.floats(max_value=0), st.just(math.nan))),
    st.builds(lambda v: {"priority": v}, st.one_of(st.floats(), _text, st.booleans())),
    st.builds(lambda v: {"extra_headers": v}, st.just({"x-n": 5})),
)

#: a prompt more than twice the window (only half of an estimate counts)
_huge_prompt = st.builds(
    lambda n: [{"role": "user", "content": "word " * n}], st.integers(2 * CONTEXT, 20 * CONTEXT)
)

#: each kind of mistake equally likely (a plain one_of favours its first, simplest branches)
_bad_calls = st.sampled_from(
    [
        st.tuples(_NOT_A_LIST, st.just({})),
        st.tuples(_huge_prompt, st.just({})),
        *(st.tuples(_with_bad_message(kind), st.just({})) for kind in _BAD_MESSAGE_KINDS),
        *(st.tuples(st.just(USER), kind) for kind in _BAD_PARAM_KINDS),
    ]
).flatmap(lambda kind: kind)


# -- the verbs ------------------------------------------------------------------------------

Verb = Callable[[gg.Gateway, object, dict[str, Any]], Awaitable[None]]


async def _chat(gate: gg.Gateway, messages: object, params: dict[str, Any]) -> None:
    await gate.chat(messages, **params)  # type: ignore[arg-type]


async def _stream(gate: gg.Gateway, messages: object, params: dict[str, Any]) -> None:
    async with gate.stream(messages, **params) as s:  # type: ignore[arg-type]
        async for _ in s:
            pass


async def _map(gate: gg.Gateway, messages: object, params: dict[str, Any]) -> None:
    """A map item holds its error (named by its index); the good items around it succeed."""
    results = await gate.map([{"messages": USER}, {"messages": messages, **params}])
    assert isinstance(results[0], gg.ChatResult)
    error = results[1]
    assert isinstance(error, gg.BadRequestError), error
    assert "item 1" in str(error)
    raise error


VERBS: dict[str, Verb] = {"chat": _chat, "stream": _stream, "map": _map}


def _run_bad_call(verb: Verb, messages: object, params: dict[str, Any]) -> gg.BadRequestError:
    """A bad call on a fresh gateway, then a good one: the bad one is refused with a typed
    error and sends nothing, the good one is served, and nothing is held or blamed."""
    script = Script(ok())
    caught: list[gg.BadRequestError] = []

    async def main() -> None:
        async with gateway(backend(script, context_tokens=CONTEXT)) as gate:
            with pytest.raises(gg.BadRequestError) as info:
                await verb(gate, messages, params)
            caught.append(info.value)
            good = 1 if verb is _map else 0  # map's good neighbour was sent
            assert len(script.requests) == good, "a refused call reached the transport"
            result = await gate.chat(USER)
            assert result.text == "hi there"
            assert len(script.requests) == good + 1
            stats = gate.stats()["mock"]
            assert (stats.failures, stats.in_flight, stats.queued) == (0, 0, 0)
            assert (stats.shed, stats.circuit) == (0, "closed")
            limiter = gate.backend_state("mock").limiter.statistics()
            assert (limiter.in_flight, limiter.queued) == (0, 0), "a permit is still held"

    anyio.run(main)
    return caught[0]


@pytest.mark.parametrize("verb", VERBS)
@EXAMPLES
@given(call=_bad_calls)
def test_a_malformed_call_is_a_typed_error_before_anything_is_sent(
    verb: str, call: tuple[object, dict[str, Any]]
) -> None:
    messages, params = call
    _run_bad_call(VERBS[verb], messages, params)


@pytest.mark.parametrize(
    ("messages", "params", "says"),
    [
        ([{"role": "user", "content": "a\ud800b"}], {}, "surrogate"),
        ([{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}], {}, "surrogate"),
        (USER, {"user": "\udc80"}, "surrogate"),
        (USER, {"temperature": math.nan}, "JSON"),
        (USER, {"logit_bias": {Opaque(): 1}}, "JSON"),
        (USER, {"max_tokens": True}, "max_tokens"),
        (USER, {"max_tokens": "300"}, "max_tokens"),
        (USER, {"max_completion_tokens": 0}, "max_completion_tokens"),
        (USER, {"private": "no"}, "private"),
        ([{"role": ["user"], "content": "x"}], {}, "role"),
        (USER, {"backend": ["mock"]}, "backend"),
        (USER, {"scenario": ["default"]}, "scenario"),
        ([{"role": "user", "content": []}], {}, "empty list of parts"),
        ([{"role": "user", "content": [{"text": "x"}]}], {}, "type"),
        ([{"role": "user", "content": "word " * 2_500}], {}, "context window"),
        (USER, {"max_tokens": CONTEXT + 1}, "context window"),
    ],
)
@pytest.mark.parametrize("verb", VERBS)
def test_each_kind_of_bad_input_is_named_in_its_error(
    verb: str, messages: object, params: dict[str, Any], says: str
) -> None:
    """The cases the hypothesis test found or that a user meets first, each by name."""
    error = _run_bad_call(VERBS[verb], messages, params)
    assert says in str(error)


def test_a_prompt_too_long_for_every_window_is_request_too_large() -> None:
    error = _run_bad_call(_chat, [{"role": "user", "content": "word " * 2_500}], {})
    assert isinstance(error, gg.RequestTooLargeError)
    assert error.limit == CONTEXT and error.requested is not None and error.requested > CONTEXT
    in_map = _run_bad_call(_map, [{"role": "user", "content": "word " * 2_500}], {})
    assert isinstance(in_map, gg.RequestTooLargeError) and in_map.limit == CONTEXT


# -- what passes through --------------------------------------------------------------------

_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_json_value = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
#: parameters gptgate does not own or read: they must reach the server exactly as given
_unknown_params = st.dictionaries(st.from_regex(r"\Ax_[a-z]{1,8}\Z"), _json_value, max_size=4)
_any_text = st.text(
    max_size=40
)  # no surrogates: hypothesis text is valid Unicode; NUL may be in it
_good_messages = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(_ROLES[:4]), "content": _any_text}),
        st.fixed_dictionaries(
            {
                "role": st.just("user"),
                "content": st.lists(
                    st.one_of(
                        st.fixed_dictionaries({"type": st.just("text"), "text": _any_text}),
                        st.fixed_dictionaries(
                            {
                                "type": st.just("image_url"),
                                "image_url": st.fixed_dictionaries({"url": _any_text}),
                            }
                        ),
                    ),
                    min_size=1,
                    max_size=3,
                ),
            }
        ),
    ),
    min_size=1,
    max_size=4,
)


@EXAMPLES
@given(messages=_good_messages, params=_unknown_params, max_tokens=st.none() | st.integers(1, 500))
def test_good_input_and_unknown_params_pass_through_untouched(
    messages: list[dict[str, Any]], params: dict[str, Any], max_tokens: int | None
) -> None:
    """The other side of refusing: nothing valid is refused or altered (NUL characters,
    image parts, ``max_tokens=None``, parameters gptgate has never heard of)."""
    script = Script(ok())

    async def main() -> None:
        async with gateway(backend(script, context_tokens=CONTEXT)) as gate:
            await gate.chat(messages, max_tokens=max_tokens, stream=False, **params)

    anyio.run(main)
    (body,) = script.bodies
    assert body["messages"] == messages
    assert body["max_tokens"] == max_tokens
    assert {k: body[k] for k in params} == params


async def test_a_nul_character_is_sent_not_refused() -> None:
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        await gate.chat([{"role": "user", "content": "a\x00b"}])
    assert b"\\u0000" in script.requests[0].content


async def test_a_window_is_checked_only_against_the_backends_the_call_may_use() -> None:
    """A long prompt fits a backend whose window is unknown or large enough; refused only
    when every eligible one (here: the private ones) is too small."""
    script = Script(ok())
    small = backend(script, name="small", context_tokens=CONTEXT, private=True)
    big = backend(script, name="big", context_tokens=100 * CONTEXT)
    unknown = backend(script, name="unknown")
    long = [{"role": "user", "content": "word " * 2_500}]
    async with gateway(small, big) as gate:
        await gate.chat(long)
        with pytest.raises(gg.RequestTooLargeError):
            await gate.chat(long, private=True)
    async with gateway(small, unknown) as gate:
        await gate.chat(long)
    assert len(script.requests) == 2


# -- configuration --------------------------------------------------------------------------

_URL = "http://127.0.0.1:9/v1"
_BACKEND: dict[str, Any] = {"name": "b", "base_url": _URL, "model": "m"}


def _gateway(**options: Any) -> gg.Gateway:
    return gg.Gateway(**{"backends": [gg.Backend(**_BACKEND)], **options})


def _backend(**fields: Any) -> gg.Backend:
    return gg.Backend(**{**_BACKEND, **fields})


_BAD_CONFIG: list[tuple[Callable[..., object], str, object]] = [
    *[
        (_backend, "base_url", url)
        for url in [
            "not a url",
            "http://",
            "https://",
            "http:///v1",
            "localhost:8000/v1",
            "//127.0.0.1/v1",
            "ftp://127.0.0.1/v1",
            "",
            "http://127.0.0.1:99999/v1",
            "http://127.0.0.1:0/v1",
            "http://exa mple.com/v1",
            "http://user:secret@127.0.0.1/v1",
            "http://127.0.0.1/v1?key=secret",
            "http://127.0.0.1/v1#frag",
            "http://127.0.0.1\n/v1",
            5,
        ]
    ],
    (_backend, "name", ""),
    (_backend, "name", "has space"),
    (_backend, "model", ""),
    (_backend, "hardware", "fpga"),
    (_backend, "tier", "medium"),
    (_backend, "concurrency", -1),
    (_backend, "concurrency", "manual"),
    (_backend, "min_concurrency", 0),
    (_backend, "max_concurrency", -3),
    (_backend, "max_connections", 0),
    (_backend, "timeout", -1.0),
    (_backend, "timeout", math.inf),
    (_backend, "timeout", math.nan),
    (_backend, "connect_timeout", math.inf),
    (_backend, "idle_timeout", 0),
    (_backend, "first_byte_timeout", math.inf),
    (_backend, "abandon_grace_s", -0.1),
    (_backend, "abandon_grace_s", math.nan),
    (_backend, "abandoned_answers", "maybe"),
    (_backend, "context_tokens", 0),
    (_backend, "context_tokens", "8k"),
    (_backend, "price", {"input_per_mtok": -1}),
    (_backend, "price", {"output_per_mtok": math.inf}),
    (_backend, "price", {"input_per_mtk": 1}),
    (_backend, "headers", {"x": 1}),
    (_backend, "concurrency_window", "nope"),
    (_backend, "concurrency_window", (5, 3)),
    (_backend, "api_key_env", ""),
    (_backend, "concurency", 4),
    (_gateway, "backends", []),
    (_gateway, "max_attempts", 0),
    (_gateway, "max_attempts", -1),
    (_gateway, "backoff_base_s", -1),
    (_gateway, "backoff_cap_s", math.inf),
    (_gateway, "retry_budget_ratio", -0.1),
    (_gateway, "retry_budget_ratio", math.inf),
    (_gateway, "breaker_threshold", 0),
    (_gateway, "max_breaker_wait_s", math.inf),
    (_gateway, "deadline_s", -5),
    (_gateway, "deadline_s", math.inf),
    (_gateway, "default_scenario", "nope"),
    (_gateway, "keep_warm_interval_s", 0),
    (_gateway, "shutdown_grace_s", -1),
    (_gateway, "max_atempts", 3),
    (gg.Scenario, "stream", "yes"),
    (gg.Scenario, "priority", "high"),
    (gg.Scenario, "priority", True),
    (gg.Scenario, "concurrency_window", (0, 5)),
    (gg.Scenario, "expected_output_tokens", 0),
    (gg.Scenario, "deadline_s", math.inf),
    (gg.Scenario, "deadline_s", -1),
    (gg.Scenario, "latency_sensitve", True),
    (gg.Scenario, "batch", {"max_size": 0}),
    (BatchPolicy, "max_size", "5"),
    (BatchPolicy, "max_wait_s", -1),
    (BatchPolicy, "max_wait_s", math.inf),
    (BatchPolicy, "max_pending", 0),
    (RampPolicy, "start", True),
    (RampPolicy, "target_hit_rate", 1.5),
    (RampPolicy, "growth", 1.0),
    (RampPolicy, "shrink", 1.0),
    (RampPolicy, "turn_wait_s", math.inf),
    (RampPolicy, "strat", 3),
    (gg.Price, "input_per_mtok", math.nan),
]


@pytest.mark.parametrize(
    ("build", "field", "value"),
    _BAD_CONFIG,
    ids=[f"{getattr(b, '__name__', b)}-{f}-{v!r}"[:60] for b, f, v in _BAD_CONFIG],
)
def test_bad_configuration_is_a_validation_error_naming_the_field(
    build: Callable[..., object], field: str, value: object
) -> None:
    with pytest.raises(ValidationError) as caught:
        build(**{field: value})
    problems = caught.value.errors()
    assert any(field in map(str, p["loc"]) or field in p["msg"] for p in problems), problems


def test_no_secret_from_a_refused_base_url_is_echoed() -> None:
    with pytest.raises(ValidationError) as caught:
        _backend(base_url="http://user:hunter2@127.0.0.1/v1")
    assert "credentials" in str(caught.value)
    assert "hunter2" not in str(caught.value) and "hunter2" not in repr(caught.value)


def test_unknown_scenario_at_call_time_is_a_bad_request_listing_the_presets() -> None:
    error = _run_bad_call(_chat, USER, {"scenario": "nope"})
    assert "realtime_chat" in str(error)


#: every config model a user builds, with what it cannot be built without
_CONFIG_MODELS: dict[Any, dict[str, Any]] = {
    gg.Backend: _BACKEND,
    gg.GatewayConfig: {"backends": [_BACKEND]},
    gg.Price: {},
    gg.Budget: {"usd_per_hour": 10.0},
    gg.Shared: {"url": "redis://127.0.0.1:6379/0"},
    gg.Scenario: {},
    BatchPolicy: {},
    RampPolicy: {},
    gg.DriftPolicy: {},
    gg.HedgePolicy: {},
    FaultPlan: {},
}


def test_every_config_model_refuses_unknown_fields() -> None:
    """A misspelt field must not be a silent default (the table above has one per model)."""
    for model in _CONFIG_MODELS:
        config = model.model_config if issubclass(model, BaseModel) else model.__pydantic_config__
        assert config.get("extra") == "forbid", model
        assert config.get("allow_inf_nan") is False, model


def _number_kind(annotation: Any) -> type | None:
    """``float`` or ``int`` when a field takes a number (alone or in a union), else None."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _number_kind(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        kinds = {_number_kind(arg) for arg in get_args(annotation)}
        return float if float in kinds else int if int in kinds else None
    return annotation if annotation in (int, float) else None


def _a_valid_number(field: Any, kind: type) -> float:
    """The field's default when it is a number, else the least its bounds allow."""
    if isinstance(field.default, (int, float)) and not isinstance(field.default, bool):
        return float(field.default)
    for bound in field.metadata:
        if getattr(bound, "ge", None) is not None:
            return float(bound.ge)
        if getattr(bound, "gt", None) is not None:
            return float(bound.gt) + 1.0
    return 1.0


def _number_fields() -> list[tuple[Any, str, type, float]]:
    found = []
    for model in _CONFIG_MODELS:
        fields = getattr(model, "model_fields", None) or model.__pydantic_fields__
        for name, field in fields.items():
            kind = _number_kind(field.annotation)
            if kind is not None:
                found.append((model, name, kind, _a_valid_number(field, kind)))
    return found


_NUMBER_FIELDS = _number_fields()


@pytest.mark.parametrize(
    ("model", "field", "kind", "valid"),
    _NUMBER_FIELDS,
    ids=[f"{m.__name__}.{f}" for m, f, _, _ in _NUMBER_FIELDS],
)
def test_a_number_given_as_a_string_or_a_bool_is_refused_naming_the_field(
    model: Any, field: str, kind: type, valid: float
) -> None:
    """``Backend(timeout="5")``, ``Budget(usd_per_hour="10")``: refused in every field of
    every config model (some converted them, some did not); an int for a float is fine."""
    required = _CONFIG_MODELS[model]
    number = kind(valid)
    built = model(**{**required, field: number})  # the number itself is valid
    assert getattr(built, field) == number
    for wrong in (str(number), True):
        with pytest.raises(ValidationError) as refused:
            model(**{**required, field: wrong})
        assert {e["loc"][0] for e in refused.value.errors()} == {field}, (wrong, field)
    if kind is float:
        whole = math.ceil(valid)
        try:
            taken = getattr(model(**{**required, field: whole}), field)
        except ValidationError as bounds:  # refused by its bounds only, never as an int
            assert all(e["type"] != "float_type" for e in bounds.errors())
        else:
            assert taken == whole and isinstance(taken, float)


def test_a_number_as_a_string_in_a_config_file_is_refused(tmp_path: Path) -> None:
    """TOML ``timeout = "5"`` was read as 5.0; a window as a TOML array still works."""
    path = tmp_path / "gateway.toml"
    path.write_text('[[backends]]\nname = "a"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                    'model = "m"\ntimeout = "5"\n')
    with pytest.raises(gg.ConfigFileError, match="timeout"):
        gg.load_config(path)
    path.write_text('[[backends]]\nname = "a"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                    'model = "m"\ntimeout = 5\nconcurrency_window = [20, 30]\n'
                    'price = {input_per_mtok = 1, output_per_mtok = 2}\n'
                    '[budget]\nusd_per_hour = 10\n')
    config = gg.load_config(path)
    assert config.backends[0].timeout == 5.0 and config.backends[0].concurrency_window == (20, 30)
    assert config.budget is not None and config.budget.usd_per_hour == 10.0


@pytest.mark.parametrize("order", ["small first", "big first"])
async def test_a_long_call_is_routed_to_a_backend_whose_window_it_fits(order: str) -> None:
    """Two backends, one with a window too small for the call: the router sent it to either
    (a 400 from a real server when it chose the small one); it now picks the one it fits,
    and short calls still use both."""
    script = Script(ok())
    small = backend(script, name="small", context_tokens=CONTEXT)
    big = backend(script, name="big", context_tokens=100 * CONTEXT)
    long = [{"role": "user", "content": "word " * 2_500}]
    pair = (small, big) if order == "small first" else (big, small)
    async with gateway(*pair) as gate:
        for _ in range(5):
            await gate.chat(long)
        stats = gate.stats()
    assert (stats["small"].calls, stats["big"].calls) == (0, 5)
