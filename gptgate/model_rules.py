"""Parameter rules of one family of a provider's models (``Provider.models``).

A provider's rules (``Provider.rejects`` / ``ignores``) hold for every model; some hold for
one family only: ``deepseek-reasoner`` answers ``logprobs`` with a 400 and drops
``temperature`` without a word, and OpenAI's reasoning models (o1, o3, o4-mini, gpt-5) refuse
``max_tokens`` in favour of ``max_completion_tokens`` and every sampling knob but its default.
A rule names its family by a glob on the model name; the dialect checks the first rule that
matches before each send, so such a call is refused, naming the parameter, the provider and
the model, instead of a 400 after a queue wait (or a setting that silently did nothing).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gptgate.errors import BadRequestError

if TYPE_CHECKING:
    from gptgate.providers import Provider

__all__ = [
    "DEEPSEEK_REASONER",
    "OPENAI_CHAT",
    "OPENAI_REASONING",
    "ModelRule",
    "check_model_params",
    "model_rules_of",
    "rule_for",
]


@dataclass(frozen=True, slots=True)
class ModelRule:
    """The parameters one family of models refuses (a 400) or silently ignores."""

    #: ``fnmatch`` globs on the model name (case-insensitive): ``("o1*", "o3*")``
    patterns: tuple[str, ...]
    rejects: frozenset[str] = field(default_factory=frozenset)
    ignores: frozenset[str] = field(default_factory=frozenset)
    #: a refused parameter that is accepted at this one value (the model's fixed default)
    accepts_only: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: what to send instead of a refused parameter: ``{"max_tokens": "max_completion_tokens"}``
    instead: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: globs that are not this family although a pattern matches (``gpt-5-chat*``)
    excludes: tuple[str, ...] = ()
    #: the family reasons on its own: Anthropic's ``thinking=`` asks for nothing it does not
    #: do anyway, and is left out rather than refused (gptgate/wire/openai_thinking.py)
    thinks: bool = False

    def matches(self, model: str) -> bool:
        name = model.lower()
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns) and not any(
            fnmatch.fnmatchcase(name, p) for p in self.excludes
        )

    def unsupported(self, param: str, value: Any) -> str | None:
        """Why ``param`` may not be sent to a model of this family, or None."""
        if param in self.accepts_only and value == self.accepts_only[param]:
            return None
        if param in self.rejects:
            return "rejects"
        if param in self.ignores:
            return "silently ignores"
        return None


#: Anthropic's own names, which the Messages API takes as they are (gptgate's Anthropic
#: dialect passes them; ``output_config`` holds Claude's effort, a top-level
#: ``cache_control`` asks for its automatic caching): OpenAI's and Azure's chat
#: API answers them with a 400 ("Unrecognized request argument supplied: top_k"), so a call
#: with one stays on Claude
_ANTHROPIC_NAMES = frozenset({"top_k", "stop_sequences", "output_config", "cache_control"})

#: OpenAI's reasoning models, on OpenAI and on Azure (Azure's "reasoning models" page lists
#: the same unsupported parameters): ``max_tokens`` is a 400 ("use max_completion_tokens"),
#: and so is every sampling parameter but temperature/top_p at their default of 1.
#: ``gpt-5-chat`` is not a reasoning model and takes them all; the gpt-5.x line takes the
#: sampling parameters with ``reasoning_effort="none"``, so it is not listed.
OPENAI_REASONING = ModelRule(
    patterns=("o1", "o1-*", "o3", "o3-*", "o4-*", "gpt-5", "gpt-5-*"),
    excludes=("gpt-5-chat*",),
    rejects=frozenset({
        "max_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty",
        "logprobs", "top_logprobs", "logit_bias",
    }) | _ANTHROPIC_NAMES,
    accepts_only=MappingProxyType({"temperature": 1, "top_p": 1}),
    instead=MappingProxyType({"max_tokens": "max_completion_tokens"}),
    thinks=True,
)

#: every other OpenAI model (on OpenAI and on Azure): Anthropic's sampling names refused
OPENAI_CHAT = ModelRule(patterns=("*",), rejects=_ANTHROPIC_NAMES)

#: ``deepseek-reasoner`` (DeepSeek's docs): logprobs/top_logprobs are an error, the sampling
#: parameters are accepted "for compatibility" and have no effect
DEEPSEEK_REASONER = ModelRule(
    patterns=("deepseek-reasoner*",),
    rejects=frozenset({"logprobs", "top_logprobs"}),
    ignores=frozenset({"temperature", "top_p", "presence_penalty", "frequency_penalty"}),
    thinks=True,
)


def model_rules_of(preset: Provider, base_url: str) -> tuple[ModelRule, ...]:
    """The rules that hold for a backend of ``preset`` at ``base_url`` (none for the default
    ``"openai"`` preset pointed at some other server)."""
    own = (preset.base_url or "").rstrip("/")
    if preset.models_at_own_url_only and base_url.rstrip("/") != own:
        return ()
    return preset.models


def rule_for(rules: tuple[ModelRule, ...], model: str) -> ModelRule | None:
    """The first rule whose family ``model`` belongs to."""
    return next((r for r in rules if r.matches(model)), None)


def check_model_params(
    rule: ModelRule, provider: str, model: str, params: Mapping[str, Any], backend: str
) -> None:
    """Raise :class:`BadRequestError` naming the first parameter ``rule`` refuses."""
    for param, value in params.items():
        why = rule.unsupported(param, value)
        if why is None:
            continue
        instead = rule.instead.get(param)
        fix = (
            f"send {instead}= instead" if instead is not None
            else f"to send it anyway: extra_body={{{param!r}: ...}}"
        )
        raise BadRequestError(
            f"bad request: provider {provider!r} {why} the parameter {param!r} for model "
            f"{model!r}; nothing was sent ({fix})",
            backend=backend,
        )
