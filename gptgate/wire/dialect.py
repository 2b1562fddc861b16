"""The dialect seam: everything that differs between providers' wires, behind one protocol.

The call path (``gptgate/calls.py``, ``pool.py``, ``sdk_client.py``) never names a wire
format: it asks its backend's dialect for the URL, the auth headers, the body, the parsed
answer, the stream reader, the error and the rate-limit budget — the way httpx puts every
network behind a transport. :class:`OpenAIDialect` is the default (any OpenAI-compatible
server; the functions of ``wire/openai.py`` bound as they are, so the default path costs no
more than before); a provider's preset (``gptgate/providers.py``) picks the dialect and its
parameter rules. A new dialect is a module with a class of this shape and a line in
:data:`DIALECTS`.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx2

from gptgate.errors import BadRequestError, GateError
from gptgate.model_rules import ModelRule, check_model_params, model_rules_of, rule_for
from gptgate.results import Usage
from gptgate.wire.anthropic_server_tools import server_tool_in
from gptgate.wire.openai import (
    ChatStreamReader,
    ParsedChat,
    build_chat_body,
    error_for_status,
    parse_chat_response,
    parse_usage,
)
from gptgate.wire.openai_messages import STRICT_DROPPED, openai_messages, with_reasoning
from gptgate.wire.openai_thinking import PARAM as THINKING
from gptgate.wire.openai_thinking import asks_to_think, thinking_fate
from gptgate.wire.ratelimits import RateLimitInfo, parse_rate_limits
from gptgate.wire.stream_usage import StreamUsageOption

if TYPE_CHECKING:
    from gptgate.config import Backend
    from gptgate.providers import Provider

__all__ = ["DIALECTS", "Dialect", "OpenAIDialect", "dialect_for"]


class Dialect(Protocol):
    """What the call path asks of a backend's wire. Pure: no I/O but ``auth``'s token
    provider (which the client runs as it sends)."""

    #: the dialect's name (``"openai"``, ``"azure"``, ``"anthropic"``)
    name: str
    #: the provider's name, for messages (``"gemini"``)
    provider: str
    #: a 429 is the provider's only usable pacing signal (Azure's RPM over windows of
    #: seconds; a hosted API that states no limit in its headers): after one, the calls its
    #: pause held go one retry-after apart, not all at once (limits/pacing.py)
    spaced_after_429: bool

    def chat_url(self, base: httpx2.URL) -> httpx2.URL:
        """The absolute chat URL under the client's ``base_url`` (which ends in ``/``)."""
        ...

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """The headers that carry a static API key (none without a key)."""
        ...

    def auth(self) -> httpx2.Auth | None:
        """Per-request auth (a token refreshed on expiry), or None: the headers suffice."""
        ...

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`BadRequestError` naming a parameter the provider rejects or ignores."""
        ...

    def check_call(self, model: str, params: Mapping[str, Any]) -> None:
        """:meth:`check_params` and the model's own rules: what :meth:`build_body` checks
        (the router asks it too, to send a call where its parameters are taken)."""
        ...

    def build_body(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        params: Mapping[str, Any],
        *,
        stream: bool,
        prompt_cache_key: str | None = None,
    ) -> bytes:
        """The request body of one attempt (parameters checked first: nothing is sent)."""
        ...

    def default_max_tokens(self, params: Mapping[str, Any]) -> int | None:
        """The ``max_tokens`` :meth:`build_body` sends for a call that gives none (what the
        budget and the pacer reserve for its answer), or None: the server's own default."""
        ...

    def parse_response(
        self,
        body: bytes,
        *,
        backend: str,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> ParsedChat:
        """A non-streamed 2xx answer, or the mapped error it carries."""
        ...

    def stream_reader(
        self, chunks: AsyncIterable[bytes], *, backend: str, request_id: str | None
    ) -> ChatStreamReader:
        """A reader of one streamed answer's deltas (the commit-point rules included)."""
        ...

    def parse_usage(self, obj: Any) -> Usage | None:
        """Token counts from the dialect's usage object."""
        ...

    def rate_limits(self, headers: Mapping[str, str]) -> RateLimitInfo | None:
        """The request/token budget a response's headers state, or None."""
        ...

    def error_for_status(
        self, status: int, headers: Mapping[str, str] | None, body: bytes, *, backend: str
    ) -> GateError:
        """The typed error of a non-2xx response."""
        ...


class OpenAIDialect:
    """The OpenAI chat-completions wire (``{base_url}chat/completions``, a Bearer key).

    The methods are ``wire/openai.py``'s functions themselves, except the parameter check,
    which only a provider with rules runs (:attr:`checked`): the default dialect's path is
    today's, call for call."""

    name = "openai"

    def __init__(self, backend: Backend, preset: Provider) -> None:
        self.provider = preset.name
        self.preset = preset
        self.backend = backend.name
        #: the provider refuses or ignores some parameters: look before each send
        self.checked = bool(preset.rejects or preset.ignores)
        #: a hosted API without limit headers: its 429s are rate limits to pace by (a
        #: self-hosted server's are a full queue, which the adaptive limit answers)
        self.spaced_after_429 = preset.rate_limits == "azure" or (
            preset.hosted and preset.rate_limits is None
        )
        #: per-model rules (gptgate/model_rules.py), the matching one looked up once a model
        self._model_rules = model_rules_of(preset, backend.base_url)
        #: the API refuses a reasoning model's message fields (wire/openai_messages.py)
        own_url = (preset.base_url or "").rstrip("/") == backend.base_url.rstrip("/")
        self._strict_messages = preset.strict_messages and (
            own_url or not preset.models_at_own_url_only
        )
        self._rule_of: dict[str, ModelRule | None] = {}
        #: the server takes stream_options until it refuses them (wire/stream_usage.py)
        self.stream_usage = StreamUsageOption()

    parse_response = staticmethod(parse_chat_response)
    parse_usage = staticmethod(parse_usage)
    rate_limits = staticmethod(parse_rate_limits)
    error_for_status = staticmethod(error_for_status)

    def chat_url(self, base: httpx2.URL) -> httpx2.URL:
        return base.copy_with(raw_path=base.raw_path + b"chat/completions")

    def auth_headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key else {}

    def auth(self) -> httpx2.Auth | None:
        return None

    def check_params(self, params: Mapping[str, Any]) -> None:
        preset = self.preset
        for param in params:
            why = preset.unsupported(param)
            if why is not None:
                raise BadRequestError(
                    f"bad request: provider {preset.name!r} {why} the parameter {param!r}; "
                    f"nothing was sent (to send it anyway: extra_body={{{param!r}: ...}})",
                    backend=self.backend,
                )

    def build_body(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        params: Mapping[str, Any],
        *,
        stream: bool,
        prompt_cache_key: str | None = None,
    ) -> bytes:
        self.check_call(model, params)
        if THINKING in params and self._thinking(model, params[THINKING]) == "drop":
            params = {k: v for k, v in params.items() if k != THINKING}
        if self._strict_messages:
            messages = openai_messages(messages, STRICT_DROPPED)
        elif self.preset.takes_thinking and self._thinking_mode(model, params):
            messages = with_reasoning(messages)  # another model's tool turn (DeepSeek)
        extra = params.get("extra_body")
        if extra is not None:
            params = _with_extra_body(params, extra)
        return build_chat_body(
            model, messages, params, stream=stream, prompt_cache_key=prompt_cache_key,
            include_usage=not self.stream_usage.refused,
        )

    def default_max_tokens(self, params: Mapping[str, Any]) -> int | None:
        return None  # the server's own default, which it does not say

    def stream_reader(
        self, chunks: AsyncIterable[bytes], *, backend: str, request_id: str | None
    ) -> ChatStreamReader:
        return ChatStreamReader(chunks, backend=backend, request_id=request_id)

    def check_call(self, model: str, params: Mapping[str, Any]) -> None:
        if self.checked:
            self.check_params(params)
        if self._model_rules:
            self._check_model(model, params)
        if THINKING in params and self._thinking(model, params[THINKING]) == "send":
            self._check_thinking_mode(model, params)
        tool = server_tool_in(params) if self._strict_messages else None
        if tool is not None:
            raise BadRequestError(
                f"bad request: provider {self.provider!r} takes no Anthropic-defined tool "
                f"({tool!r} in tools); nothing was sent", backend=self.backend,
            )

    def _check_thinking_mode(self, model: str, params: Mapping[str, Any]) -> None:
        """``thinking`` enabled on a provider that takes it (DeepSeek) puts any model in its
        thinking mode, whose rules are its reasoning family's (``ModelRule.thinks``): the
        sampling parameters it ignores are refused as they are for ``deepseek-reasoner``."""
        if not asks_to_think(params[THINKING]):
            return
        rule = next((r for r in self._model_rules if r.thinks), None)
        if rule is not None and rule is not self._rule(model):
            check_model_params(rule, self.provider, model, params, self.backend)

    def _thinking_mode(self, model: str, params: Mapping[str, Any]) -> bool:
        """The call runs in the model's thinking mode: a reasoning family's model, or
        ``thinking`` enabled."""
        rule = self._rule(model)
        return (rule is not None and rule.thinks) or asks_to_think(params.get(THINKING))

    def _rule(self, model: str) -> ModelRule | None:
        if not self._model_rules:
            return None
        if model not in self._rule_of:
            self._rule_of[model] = rule_for(self._model_rules, model)
        return self._rule_of[model]

    def _check_model(self, model: str, params: Mapping[str, Any]) -> None:
        rule = self._rule(model)
        if rule is not None:
            check_model_params(rule, self.provider, model, params, self.backend)

    def _thinking(self, model: str, value: Any) -> Literal["send", "drop"]:
        """Anthropic's ``thinking=`` here: sent, left out, or refused
        (gptgate/wire/openai_thinking.py)."""
        rule = self._rule(model)
        return thinking_fate(
            value, takes=self.preset.takes_thinking, thinks=rule is not None and rule.thinks,
            provider=self.provider, model=model, backend=self.backend,
        )


def _with_extra_body(params: Mapping[str, Any], extra: Any) -> dict[str, Any]:
    """``extra_body=``: its keys go into the body as they are (the openai SDK's meaning),
    unchecked — the way to send what a provider's rules would refuse."""
    if not isinstance(extra, Mapping):
        raise BadRequestError("extra_body must be a mapping of body keys to values")
    merged = {k: v for k, v in params.items() if k != "extra_body"}
    merged.update(extra)
    return merged


#: dialect name → ``module:Class`` (imported on first use: a dialect's module costs nothing
#: to a gateway that never speaks it)
DIALECTS: dict[str, str] = {
    "openai": "gptgate.wire.dialect:OpenAIDialect",
    "azure": "gptgate.wire.azure:AzureDialect",
    "anthropic": "gptgate.wire.anthropic:AnthropicDialect",
}


def dialect_for(backend: Backend) -> Dialect:
    """The dialect instance that speaks to ``backend`` (one per backend: Azure's carries its
    deployment and token provider)."""
    from gptgate.providers import PROVIDERS

    preset = PROVIDERS[backend.provider]
    module_name, _, class_name = DIALECTS[preset.dialect].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:  # the dialect is there; something it needs is not
            raise
        raise NotImplementedError(
            f"provider {preset.name!r}: its {preset.dialect!r} dialect is not in this gptgate"
        ) from None
    dialect: Dialect = cls(backend, preset)
    return dialect
