"""Scenarios: how a kind of work should be called, and the stream rule (docs/background.md).

A scenario bundles the decisions a user should not have to re-derive per call: is a person
waiting (priority, streaming), which concurrency window suits it, whether to micro-batch, and
whether to warm the prompt cache and ramp up behind it. Presets are starting points; the
gateway still measures and adapts inside them.

Like the backends' config, these models refuse a misspelt field (``extra="forbid"``: a typo
would otherwise be a silent default), an int given as a string or a bool, and an infinite or
NaN number, with pydantic's ``ValidationError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
)

from .errors import BadRequestError
from .hedge import HedgePolicy

__all__ = [
    "PRESETS",
    "BatchPolicy",
    "RampPolicy",
    "Scenario",
    "StreamDecision",
    "decide_stream",
    "expected_output_tokens",
    "is_multimodal",
    "resolve_scenario",
]


_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class BatchPolicy(BaseModel):
    """Collect up to ``max_size`` items or for ``max_wait_s``, whichever comes first."""

    model_config = _STRICT

    max_size: StrictInt = Field(default=5, ge=1, le=10_000)
    max_wait_s: StrictFloat = Field(default=2.0, ge=0.0)
    #: pending items beyond this make ``submit`` wait (backpressure), never drop
    max_pending: StrictInt = Field(default=10_000, ge=1)

    REALTIME: ClassVar[BatchPolicy]
    MICRO: ClassVar[BatchPolicy]
    SMALL: ClassVar[BatchPolicy]
    LARGE: ClassVar[BatchPolicy]


BatchPolicy.REALTIME = BatchPolicy(max_size=1, max_wait_s=0.0)
BatchPolicy.MICRO = BatchPolicy(max_size=5, max_wait_s=2.0)
BatchPolicy.SMALL = BatchPolicy(max_size=20, max_wait_s=5.0)
BatchPolicy.LARGE = BatchPolicy(max_size=50, max_wait_s=10.0)


class RampPolicy(BaseModel):
    """Cache warm-up then a ramp window per (backend, prefix group).

    One call warms a cold prefix alone; then at most ``start`` calls of the group are in flight
    until the hit rate (cached input over the cacheable part) holds ``>= target_hit_rate`` over
    ``window`` samples; then the window widens by ``growth`` per good window up to the backend's
    limit, and shrinks by ``shrink`` when the hit rate falls below target — unless the misses
    look like a spill (one call, or once a few among at least as many hits: a replica the
    prefix just spread to, still cold for it): then the width holds and is judged again.
    """

    model_config = _STRICT

    warmup: bool = True
    start: StrictInt = Field(default=5, ge=1)
    target_hit_rate: StrictFloat = Field(default=0.85, gt=0.0, le=1.0)
    window: StrictInt = Field(default=5, ge=1)
    growth: StrictFloat = Field(default=2.0, gt=1.0)
    shrink: StrictFloat = Field(default=0.5, gt=0.0, lt=1.0)
    #: prefixes shorter than this are not worth warming (OpenAI caches from 1,024 tokens)
    min_prefix_tokens: StrictInt = Field(default=1024, ge=0)
    #: prefix groups take *turns* per backend: a new group starts only while the groups
    #: already running cannot fill the backend's limit, and waits at most this long (clock
    #: seconds) for its turn; ``None`` starts every group at once. Turns keep few prefixes
    #: live at a time, so on a server whose prefix cache shares KV memory with the running
    #: calls they evict each other less — for jobs, not for a person waiting.
    turn_wait_s: StrictFloat | None = Field(default=None, gt=0)


class Scenario(BaseModel):
    """How a kind of work is called. Use a preset name or build your own."""

    model_config = _STRICT

    name: str = Field(default="custom", min_length=1)
    #: a person is waiting: stream, admit first, route to the fastest first token
    latency_sensitive: bool = False
    #: True/False forces the mode; "auto" applies the stream rule
    stream: StrictBool | Literal["auto"] = "auto"
    #: bounds for the adaptive limit while this scenario dominates, e.g. (20, 30)
    concurrency_window: tuple[StrictInt, StrictInt] | None = None
    batch: BatchPolicy | None = None
    #: micro-batch only when the work is offline (multimodal)
    batch_only_offline: bool = False
    ramp: RampPolicy | None = None
    #: admission priority: higher goes first (with aging, so lower never starves)
    priority: StrictInt = 0
    #: expected answer length when the call gives no max_tokens (drives the stream rule)
    expected_output_tokens: StrictInt | None = Field(default=None, ge=1)
    #: total deadline per call in seconds (None → the backend's timeout)
    deadline_s: StrictFloat | None = Field(default=None, gt=0)
    offline: bool = False
    #: tail hedging for this scenario's calls: True (the default policy), or a HedgePolicy
    #: with its knobs; a call's own ``hedge=`` overrides it (docs/guide.md "Hedging")
    hedge: HedgePolicy | None = None

    @field_validator("hedge", mode="before")
    @classmethod
    def _check_hedge(cls, value: object) -> object:
        if value is True:
            return HedgePolicy()
        if value is False:
            return None
        return value

    @field_validator("concurrency_window")
    @classmethod
    def _check_window(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError("concurrency_window must be (low, high) with 1 <= low <= high")
        return value


PRESETS: dict[str, Scenario] = {
    "realtime_chat": Scenario(
        name="realtime_chat",
        latency_sensitive=True,
        stream=True,
        concurrency_window=(20, 30),
        batch=None,
        ramp=RampPolicy(),
        priority=10,
    ),
    "batch_content": Scenario(
        name="batch_content",
        stream=False,
        concurrency_window=(30, 50),
        batch=BatchPolicy(max_size=8, max_wait_s=2.0),
        ramp=RampPolicy(target_hit_rate=0.85, turn_wait_s=600.0),
        priority=5,
        offline=True,
    ),
    "multimodal": Scenario(
        name="multimodal",
        stream=False,
        concurrency_window=(10, 15),
        batch=BatchPolicy.MICRO,
        batch_only_offline=True,
        ramp=None,
        priority=5,
    ),
    "offline": Scenario(
        name="offline",
        stream=False,
        batch=BatchPolicy.SMALL,
        ramp=RampPolicy(turn_wait_s=1800.0),
        priority=0,
        offline=True,
    ),
    "default": Scenario(name="default", ramp=None, priority=5),
}


def resolve_scenario(scenario: str | Scenario | None) -> Scenario:
    """A preset by name, a custom Scenario, or the default. Unknown names raise ``KeyError``
    (the gateway turns it into ``BadRequestError`` before anything is sent)."""
    if scenario is None:
        return PRESETS["default"]
    if isinstance(scenario, Scenario):
        return scenario
    known = ", ".join(sorted(PRESETS))
    if not isinstance(scenario, str):
        raise KeyError(f"scenario must be a preset name ({known}) or a Scenario, not {scenario!r}")
    try:
        return PRESETS[scenario]
    except KeyError:
        raise KeyError(f"unknown scenario {scenario!r}; known: {known}") from None


def scenario_for_call(scenario: str | Scenario | None) -> Scenario:
    """:func:`resolve_scenario` for a verb's ``scenario=`` (``chat``, ``@gate.guard``,
    ``http_client``): an unknown name is the caller's ``BadRequestError``, as everywhere."""
    try:
        return resolve_scenario(scenario)
    except KeyError as exc:
        raise BadRequestError(str(exc.args[0])) from None


StreamDecision = Literal[
    "explicit",
    "scenario",
    "multimodal",
    "latency_sensitive",
    "batch",
    "short_output",
    "long_output",
    "default",
    #: a hedged call streams on the wire so it can be raced to its first token
    "hedge",
]

SHORT_OUTPUT_TOKENS = 200
LONG_OUTPUT_TOKENS = 800


def is_multimodal(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Any content part that is not text (image, audio, file) makes a call multimodal."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get("type", "text") != "text":
                    return True
    return False


def expected_output_tokens(params: Mapping[str, Any], scenario: Scenario) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = params.get(name)
        if isinstance(value, int):
            return value
    return scenario.expected_output_tokens


def decide_stream(
    scenario: Scenario,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    explicit: bool | None = None,
) -> tuple[bool, StreamDecision]:
    """The stream rule (docs/concepts/stream-rule.md), first match wins:

    explicit choice → it; multimodal → no; a scenario that forces a mode → it; live chat
    (latency-sensitive) → yes; batch/offline → no; expected output < 200 tokens → no;
    > 800 → yes; otherwise no (a connection held for less time).
    """
    if explicit is not None:
        return explicit, "explicit"
    if is_multimodal(messages):
        return False, "multimodal"
    if scenario.latency_sensitive:
        return True, "latency_sensitive"
    if scenario.stream != "auto" and scenario.name not in PRESETS:
        return bool(scenario.stream), "scenario"
    if scenario.offline or scenario.batch is not None:
        return False, "batch"
    expected = expected_output_tokens(params, scenario)
    if expected is not None:
        if expected < SHORT_OUTPUT_TOKENS:
            return False, "short_output"
        if expected > LONG_OUTPUT_TOKENS:
            return True, "long_output"
    if scenario.stream != "auto":
        return bool(scenario.stream), "scenario"
    return False, "default"
