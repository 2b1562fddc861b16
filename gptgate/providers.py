"""``gg.PROVIDERS``: what each ``Backend(provider=...)`` name changes.

A provider is a preset, not a plugin: the wire dialect that speaks to it, where a hosted one
lives, which environment variable holds its key, the parameters it refuses (a 400) or drops
without a word, and which family of rate-limit headers it sends. ``Backend`` reads the
defaults from here at construction; the dialect (``gptgate/wire/dialect.py``) reads the
parameter rules before every send. Everything not listed is today's OpenAI-compatible path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from gptgate.model_rules import DEEPSEEK_REASONER, OPENAI_CHAT, OPENAI_REASONING, ModelRule

__all__ = ["AZURE_API_VERSION", "PROVIDERS", "Provider", "RateLimitFamily", "provider_defaults",
           "unserved"]

#: the ``api-version`` of Azure's deployments API when none is given (the GA version the
#: openai SDK's docs use; ``OPENAI_API_VERSION`` overrides it, as it does the SDK's)
AZURE_API_VERSION = "2024-10-21"

#: which headers a provider paces its clients with (``gptgate/wire/ratelimits.py``):
#: ``"openai"`` ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; ``"azure"`` the
#: same, plus ``retry-after-ms``, values of -1 and 1 s / 10 s RPM windows; ``"anthropic"``
#: ``anthropic-ratelimit-*`` with RFC 3339 resets; None: nothing (self-hosted servers)
RateLimitFamily = Literal["openai", "azure", "anthropic"] | None


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider's preset (read-only; listed in ``gg.PROVIDERS``)."""

    name: str
    #: the wire dialect: ``"openai"`` (any OpenAI-compatible server), ``"azure"``,
    #: ``"anthropic"`` (native Messages API)
    dialect: str
    #: the default ``base_url``; None: it must be given (an Azure resource is the user's own)
    base_url: str | None
    #: where ``api_key=None`` looks for the key
    api_key_env: str
    rate_limits: RateLimitFamily = None
    #: parameters the provider answers with a 400: refused before sending instead
    rejects: frozenset[str] = field(default_factory=frozenset)
    #: parameters the provider accepts and silently ignores: refused too (the caller thinks
    #: they took effect); ``extra_body=`` still sends them on purpose
    ignores: frozenset[str] = field(default_factory=frozenset)
    #: the most inputs one embeddings request takes, when known
    max_embedding_inputs: int | None = None
    #: the most tokens (all inputs together) one embeddings request takes, when known
    max_embedding_tokens: int | None = None
    #: a hosted service (billed per token) rather than a server of one's own
    hosted: bool = True
    #: whether it has an embeddings endpoint at all (Anthropic and DeepSeek have none)
    serves_embeddings: bool = True
    #: rules of one family of its models (gptgate/model_rules.py), the first match checked
    models: tuple[ModelRule, ...] = ()
    #: the model rules hold at the preset's own ``base_url`` only: ``"openai"`` is also the
    #: default for any compatible server, whose model names mean nothing to OpenAI's rules
    models_at_own_url_only: bool = False
    #: its API refuses a message field it does not know (OpenAI's schema: "Additional
    #: properties are not allowed"): a reasoning model's ``reasoning_content`` is left out of
    #: the messages sent there (wire/openai_messages.py); on ``"openai"`` at its own URL only
    strict_messages: bool = False
    #: its OpenAI format takes Anthropic's ``thinking`` as it is (DeepSeek's thinking-mode
    #: switch); elsewhere the dialect leaves it out or refuses it (wire/openai_thinking.py)
    takes_thinking: bool = False
    #: ``gen_ai.provider.name`` where the GenAI conventions give this provider a well-known
    #: value of their own (``azure.ai.openai``, …); None: its ``name`` (the conventions' too,
    #: or none of theirs fits: a self-hosted server, a router)
    semconv_name: str | None = None
    #: its server caches a prompt in the slot that ran it (llama.cpp's server): two calls of
    #: one prefix at once prefill it twice, so the cache gate runs one call per prefix at first
    #: and lets prefixes run side by side (gptgate/cache_slots.py)
    slot_cache: bool = False
    #: its server reports its own load (vLLM's and SGLang's ``/metrics``, llama.cpp's
    #: ``/slots``): ``Backend(signals=None)`` reads it (gptgate/signals_auto.py)
    reports_load: bool = False

    def unsupported(self, param: str) -> str | None:
        """Why ``param`` may not be sent to this provider, or None when it may."""
        if param in self.rejects:
            return "rejects"
        if param in self.ignores:
            return "silently ignores"
        return None


def _local(
    name: str, port: int, env: str, ignores: frozenset[str] = frozenset(),
    max_embedding_inputs: int | None = None, slot_cache: bool = False,
    reports_load: bool = False,
) -> Provider:
    return Provider(
        name, "openai", f"http://localhost:{port}/v1", env, ignores=ignores, hosted=False,
        max_embedding_inputs=max_embedding_inputs, slot_cache=slot_cache,
        reports_load=reports_load,
    )


_OPENAI_EXTRAS = frozenset({"store", "metadata", "service_tier"})

PROVIDERS: Mapping[str, Provider] = MappingProxyType({
    p.name: p
    for p in (
        Provider(
            "openai", "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "openai",
            max_embedding_inputs=2048, max_embedding_tokens=300_000,
            models=(OPENAI_REASONING, OPENAI_CHAT), models_at_own_url_only=True,
            strict_messages=True,
        ),
        Provider(
            "azure", "azure", None, "AZURE_OPENAI_API_KEY", "azure", max_embedding_inputs=2048,
            max_embedding_tokens=300_000, models=(OPENAI_REASONING, OPENAI_CHAT),
            strict_messages=True, semconv_name="azure.ai.openai",
        ),
        Provider(
            "anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY",
            "anthropic", serves_embeddings=False,
        ),
        Provider(
            "deepseek", "openai", "https://api.deepseek.com", "DEEPSEEK_API_KEY",
            models=(DEEPSEEK_REASONER,), serves_embeddings=False, takes_thinking=True,
        ),
        Provider(
            "gemini", "openai", "https://generativelanguage.googleapis.com/v1beta/openai",
            "GEMINI_API_KEY",
            rejects=_OPENAI_EXTRAS | {"frequency_penalty", "presence_penalty", "logit_bias"},
            max_embedding_inputs=100, strict_messages=True, semconv_name="gcp.gemini",
        ),
        Provider(
            "groq", "openai", "https://api.groq.com/openai/v1", "GROQ_API_KEY", "openai",
            rejects=frozenset({"logprobs", "top_logprobs", "logit_bias"}), strict_messages=True,
        ),
        Provider("openrouter", "openai", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        Provider("together", "openai", "https://api.together.xyz/v1", "TOGETHER_API_KEY", "openai"),
        Provider(
            "mistral", "openai", "https://api.mistral.ai/v1", "MISTRAL_API_KEY",
            rejects=_OPENAI_EXTRAS | {"logit_bias", "logprobs", "top_logprobs"},
            strict_messages=True, semconv_name="mistral_ai",
        ),
        # /metrics: vLLM's always, SGLang's with --enable-metrics; llama.cpp: /slots by default
        _local("vllm", 8000, "VLLM_API_KEY", reports_load=True),
        _local("sglang", 30000, "SGLANG_API_KEY", reports_load=True),
        # llama-server embeds at most --batch-size tokens per input; its parallel slots cap inputs
        _local("llamacpp", 8080, "LLAMA_API_KEY", max_embedding_inputs=32, slot_cache=True,
               reports_load=True),
        # its OpenAI endpoint drops Ollama's own options: a num_ctx there does nothing, and
        # the prompt is cut to the default context without a word
        _local("ollama", 11434, "OLLAMA_API_KEY", ignores=frozenset({"num_ctx", "options"})),
        _local("lmstudio", 1234, "LMSTUDIO_API_KEY"),
    )
})


def unserved(preset: Provider, base_url: str, *, signals: bool, embedding_model: str | None
             ) -> str | None:
    """Why a backend asks ``preset`` at ``base_url`` for what it does not serve, or None.

    Said at construction rather than at the first call: ``signals=True`` on a hosted API
    would poll a ``/metrics`` that is not there for the process's whole life (a stale reading
    and one log line), and an ``embedding_model`` on a provider without embeddings would
    route ``gate.embed`` to a backend that can only fail it. Both hold only at the preset's
    own service: the same preset pointed at another server (a proxy, the simulator) may."""
    own = preset.base_url is None or base_url.rstrip("/") == preset.base_url.rstrip("/")
    if signals and preset.hosted and own:
        return (f"signals=True reads a self-hosted server's load (vLLM, SGLang, llama.cpp); "
                f"provider={preset.name!r} serves no /metrics: drop signals=True")
    if embedding_model is not None and not preset.serves_embeddings and (
        own or preset.dialect == "anthropic"
    ):
        return (f"provider={preset.name!r} has no embeddings endpoint: put embedding_model= "
                "on a backend of a provider that serves embeddings")
    return None


def provider_defaults(data: dict[str, object]) -> dict[str, object]:
    """A ``Backend``'s fields with its provider's defaults filled in where absent: the
    ``base_url`` (Azure's from ``AZURE_OPENAI_ENDPOINT``, as the openai SDK reads it), the
    key's variable, and for an Azure deployment its ``model`` and ``api_version``."""
    provider = data.get("provider", "openai")
    preset = PROVIDERS.get(provider) if isinstance(provider, str) else None
    if preset is None:
        return data
    data = dict(data)
    if data.get("base_url") is None:
        url = os.environ.get("AZURE_OPENAI_ENDPOINT") if preset.name == "azure" else None
        url = url or preset.base_url
        if url is not None:
            data["base_url"] = url
        else:
            data.pop("base_url", None)  # "Field required", named
    data.setdefault("api_key_env", preset.api_key_env)
    deployment = data.get("deployment")
    if preset.name == "azure" and deployment is not None:
        data.setdefault("model", deployment)
        if data.get("api_version") is None:
            data["api_version"] = os.environ.get("OPENAI_API_VERSION") or AZURE_API_VERSION
    return data
