"""Configuration: ``Backend``, ``Price`` and ``GatewayConfig`` (pydantic, validated up front).

A bad value fails at construction with pydantic's ``ValidationError`` naming the field, not at
3 a.m. on the first call. API keys are ``SecretStr``: they never show in a repr, a log or an
error; ``api_key=None`` reads the key from the environment at request time.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any, Literal

import httpx2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from .budget import Budget
from .results import Usage
from .shared.config import Shared
from .shared.scope import check_fleet_key

if TYPE_CHECKING:
    from .signals_auto import SignalsMode

__all__ = ["Backend", "GatewayConfig", "Hardware", "Price", "Tier", "pool_size_for"]

Hardware = Literal["tpu", "gpu", "cpu"]
Tier = Literal["small", "large"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
#: a host name, an IPv4 address, an IPv6 address (``[::1]``, shown without brackets) or an
#: internationalized name; anything else (a space, a percent-escape) is a typo
_HOST = re.compile(r"^[\w.:-]+$")


def pool_size_for(max_concurrency: int) -> int:
    """Connections for a backend: target concurrency + 20% (fewer make pseudo-concurrency)."""
    return math.ceil(1.2 * max_concurrency)


class Price(BaseModel):
    """Dollars per million tokens: the one place a call's cost is computed.

    ``cached_input_per_mtok`` prices prompt tokens read from the provider's cache and
    ``cache_write_per_mtok`` those written to it; each defaults to the input price (a
    provider that bills no difference). Anthropic bills writes at 1.25× its input price (2×
    for the 1-hour cache) and reads at 0.1×; OpenAI bills reads at 0.5× or less and writes
    at the input price; DeepSeek bills a cache hit at a fraction of a miss ($0.07 against
    $0.27 for deepseek-chat).
    Reasoning tokens are output tokens and cost the output price.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: dollars per million prompt tokens neither read from nor written to the cache
    input_per_mtok: StrictFloat = Field(default=0.0, ge=0)
    #: dollars per million prompt tokens read from the provider's cache; None → the input price
    cached_input_per_mtok: StrictFloat | None = Field(default=None, ge=0)
    #: dollars per million output tokens (reasoning tokens included)
    output_per_mtok: StrictFloat = Field(default=0.0, ge=0)
    #: dollars per million prompt tokens written to the cache (Anthropic: 1.25× its input
    #: price, 2× for the 1-hour cache); None → the input price
    cache_write_per_mtok: StrictFloat | None = Field(default=None, ge=0)
    #: dollars per million prompt tokens written to Anthropic's one-hour cache (2× its input
    #: price; ``Usage.cache_write_1h_input_tokens``); None → the write price above
    cache_write_1h_per_mtok: StrictFloat | None = Field(default=None, ge=0)
    #: dollars per 1,000 searches of a server-side web search tool (Anthropic's: $10;
    #: ``Usage.web_search_requests``); 0 books them at nothing
    web_search_per_k: StrictFloat = Field(default=0.0, ge=0)

    @property
    def cache_read_rate(self) -> float:
        rate = self.cached_input_per_mtok
        return self.input_per_mtok if rate is None else rate

    @property
    def cache_write_rate(self) -> float:
        rate = self.cache_write_per_mtok
        return self.input_per_mtok if rate is None else rate

    @property
    def cache_write_1h_rate(self) -> float:
        rate = self.cache_write_1h_per_mtok
        return self.cache_write_rate if rate is None else rate

    def cost(self, usage: Usage) -> float:
        """The dollars ``usage`` costs: prompt tokens neither read from nor written to the
        cache at the input price, reads and writes at theirs, output at the output price."""
        total = usage.input_tokens
        read = usage.cached_input_tokens
        if read > total:
            read = total
        read_rate = self.cached_input_per_mtok
        dollars = (
            (total - read) * self.input_per_mtok
            + (read * read_rate if read_rate is not None else read * self.input_per_mtok)
            + usage.output_tokens * self.output_per_mtok
        )
        write = usage.cache_write_input_tokens
        if write:  # on every call path but Anthropic's (and OpenRouter's), none
            write = min(write, total - read)
            dollars += write * (self.cache_write_rate - self.input_per_mtok)
            hour = min(usage.cache_write_1h_input_tokens, write)
            if hour:  # Anthropic's one-hour cache: its writes at their own price
                dollars += hour * (self.cache_write_1h_rate - self.cache_write_rate)
        searches = usage.web_search_requests * self.web_search_per_k / 1000
        return dollars / 1_000_000 + searches

    def most_cost(self, input_tokens: int, output_tokens: int) -> float:
        """The dearest outcome of a prompt and an answer of these sizes (what a budget
        reserves): the whole prompt at the dearest of the input and cache-write prices."""
        rate = max(self.input_per_mtok, self.cache_write_rate, self.cache_write_1h_rate)
        return (input_tokens * rate + output_tokens * self.output_per_mtok) / 1_000_000


class Backend(BaseModel):
    """One OpenAI-compatible endpoint (a deployment of a model on some hardware).

    Numbers are finite (``allow_inf_nan=False``): an infinite timeout or price is a hang or a
    bill nobody meant; "no limit" is ``None`` where a field allows it. A ``ValidationError``
    names the field and the rule but not the value given (``hide_input_in_errors``): that
    value may be a key pasted into ``base_url`` or ``headers``."""

    model_config = ConfigDict(
        frozen=True,
        arbitrary_types_allowed=True,
        extra="forbid",
        allow_inf_nan=False,
        hide_input_in_errors=True,
    )

    name: str
    #: the wire dialect, auth, parameter rules and rate-limit headers: a name of
    #: ``gg.PROVIDERS`` (docs/providers.md); also the spans' ``gen_ai.provider.name`` (the
    #: conventions' value where they have one: ``azure`` → ``azure.ai.openai``)
    provider: str = Field(default="openai", min_length=1)
    #: optional where the provider's preset has one (``gg.PROVIDERS[provider].base_url``)
    base_url: str
    model: str = Field(min_length=1)
    hardware: Hardware = "gpu"
    api_key: SecretStr | None = Field(default=None, repr=False)
    #: where ``api_key=None`` looks (default: the provider's, ``OPENAI_API_KEY`` for
    #: ``"openai"``); a missing variable sends no key
    api_key_env: str = Field(default="OPENAI_API_KEY", min_length=1)
    #: with ``shared=``: the scope whose limit, 429 pause, RPM/TPM budget and circuit the
    #: backend shares across the fleet — a label (the provider project its key belongs to);
    #: None: its name, as before (gptgate/shared/scope.py, docs/guide/many-processes.md)
    fleet_key: str | None = None
    #: "auto" → adaptive limit between min and max; an int → that fixed limit
    #: (ints are strict here and below: ``"8"`` or ``True`` is refused, not read as 8 or 1)
    concurrency: Literal["auto"] | StrictInt = "auto"
    min_concurrency: StrictInt = Field(default=1, ge=1)
    initial_concurrency: StrictInt = Field(default=4, ge=1)
    max_concurrency: StrictInt = Field(default=64, ge=1, le=10_000)
    #: bound the adaptive limit to a scenario's window: a preset name ("realtime_chat" →
    #: 20-30) or (low, high). Ignored for a fixed concurrency.
    concurrency_window: tuple[StrictInt, StrictInt] | str | None = None
    #: connections; default ceil(1.2 × max concurrency)
    max_connections: StrictInt | None = Field(default=None, ge=1)
    #: per-attempt deadline in seconds (headers and whole body)
    timeout: StrictFloat = Field(default=60.0, gt=0)
    connect_timeout: StrictFloat = Field(default=5.0, gt=0)
    #: waiting for a pooled connection
    pool_timeout: StrictFloat = Field(default=10.0, gt=0)
    #: time to a stream's first byte (a plain answer's is bounded by ``timeout``); None →
    #: ``timeout``
    first_byte_timeout: StrictFloat | None = Field(default=None, gt=0)
    #: longest silence between two stream chunks
    idle_timeout: StrictFloat = Field(default=30.0, gt=0)
    #: a request we hung up on (a timeout, a cancelled call, a stream left mid-answer) keeps
    #: its concurrency slot this long: the backend works on it until it notices the
    #: disconnect (llama-server: ~10 ms for a stream, never for a non-streamed answer, which
    #: it finishes — measured in docs/guide/timeouts.md)
    abandon_grace_s: StrictFloat = Field(default=0.1, ge=0)
    #: what the backend does with a non-streamed answer whose client hung up (a timeout, a
    #: cancelled call): ``"stop"`` (it notices: the simulator, vLLM) or ``"finish"`` (it
    #: generates the whole answer anyway: llama-server, measured). With ``"finish"`` gptgate
    #: does not hang up: it reads the answer to its end in the background (bounded by
    #: ``timeout``) and the slot stays taken until then (docs/guide/deadlines.md)
    abandoned_answers: Literal["stop", "finish"] = "stop"
    private: bool = False
    tier: Tier = "large"
    #: dollars per million tokens; None → the provider's list price from the genai-prices
    #: table (the `prices` extra) when it knows a hosted provider's model, else $0 (one log
    #: line) — see docs/providers.md "Usage and prices"
    price: Price | None = None
    #: Azure OpenAI: the deployment (``/openai/deployments/{deployment}/...``); None: the
    #: ``/openai/v1/`` API, which takes ``model``
    deployment: str | None = Field(default=None, min_length=1)
    #: Azure OpenAI: the ``api-version`` of the deployments API
    api_version: str | None = Field(default=None, min_length=1)
    #: Azure OpenAI: a sync or async callable returning an Entra ID bearer token (a str, or
    #: an object with ``token`` and ``expires_on``), asked again when the token expires
    azure_ad_token_provider: Any = Field(default=None, repr=False, exclude=True)
    #: the model's context window in tokens (prompt + answer), when known: a call that cannot
    #: fit any eligible backend's window is refused before it is sent (RequestTooLargeError)
    context_tokens: StrictInt | None = Field(default=None, ge=1)
    #: the most tokens the backend answers in one call (its server's own cap: llama-server's
    #: ``--n-predict``, a hosted model's output limit), when known: a small-tier answer cut at
    #: ``length`` is escalated only when a large-tier backend can answer longer (docs/tiers.md)
    max_output_tokens: StrictInt | None = Field(default=None, ge=1)
    #: what the model takes beyond text — ``("image",)``, ``("image", "audio", "file")``, or
    #: ``()`` for a text-only model. None: known models by name (gptgate/media_fit.py), else
    #: anything (the server decides). A call carrying media goes to a backend that takes it,
    #: as to one whose context window it fits (docs/tiers.md "Media")
    media: tuple[Literal["image", "audio", "file"], ...] | None = None
    #: what a Batch API job (``gate.batch``) pays of ``price``: OpenAI's, Azure's and
    #: Anthropic's batches run at half price
    batch_discount: StrictFloat = Field(default=0.5, gt=0, le=1)
    #: send ``prompt_cache_key`` for the call's prefix group
    supports_prompt_cache_key: bool = False
    #: the model this backend's ``/embeddings`` serves; None: ``gate.embed`` never routes
    #: here (docs/embeddings.md)
    embedding_model: str | None = Field(default=None, min_length=1)
    #: the most inputs, and tokens, one embeddings request may carry; None: the provider
    #: preset's (``gg.PROVIDERS``), else 256 inputs and no token cap
    embedding_max_inputs: StrictInt | None = Field(default=None, ge=1)
    embedding_max_tokens: StrictInt | None = Field(default=None, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)
    #: read the server's own load (vLLM/SGLang ``/metrics``, llama.cpp ``/slots``) into the
    #: limit and the router, every ``signals_interval_s`` (docs/signals.md; the ``signals``
    #: extra). None: on for a ``vllm``, ``sglang`` or ``llamacpp`` backend whose server
    #: serves them and with the extra installed, else off, quietly (``signals_mode``)
    signals: bool | None = None
    signals_interval_s: StrictFloat = Field(default=2.0, ge=0.05, le=3600)
    #: an ``httpx2.AsyncBaseTransport`` to use instead of the network (the simulator, a mock)
    transport: Any = Field(default=None, repr=False, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _provider_defaults(cls, data: Any) -> Any:
        """The preset's ``base_url`` and key variable where the caller gave none (an
        explicit value always wins; an unknown provider is left for its field's check)."""
        if isinstance(data, dict):
            from .providers import provider_defaults

            data = provider_defaults(data)
        return data

    @field_validator("provider")
    @classmethod
    def _check_provider(cls, value: str) -> str:
        from .providers import PROVIDERS

        if value not in PROVIDERS:
            raise ValueError(f"unknown provider {value!r}; known: {', '.join(PROVIDERS)}")
        return value

    @field_validator("deployment", "api_version", "azure_ad_token_provider")
    @classmethod
    def _azure_only(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("provider")  # absent: its own check failed, said there
        if value is not None and provider is not None and provider != "azure":
            raise ValueError(f"{info.field_name} is for provider='azure' only")
        if info.field_name == "azure_ad_token_provider" and value is not None:
            if not callable(value):
                raise ValueError("azure_ad_token_provider must be a callable returning a token")
        elif isinstance(value, str) and not re.fullmatch(r"[\w.:-]+", value):
            raise ValueError(f"{info.field_name} must be letters, digits, '_', '.', ':', '-'")
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("name must be 1-64 chars of letters, digits, '_', '.', ':', '-'")
        return value

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if any(c.isspace() for c in value):
            # a key pasted after the URL would go out in every request's path
            raise ValueError("base_url must not contain whitespace")
        try:
            url = httpx2.URL(value)
        except Exception as exc:
            # the parser quotes the part it could not read: a key pasted where the port goes
            detail = re.sub(r"'[^']{2,}'", "'…'", str(exc))
            raise ValueError(f"malformed URL: {detail}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError("base_url must be an absolute http(s) URL with a host")
        if not _HOST.match(url.host):
            raise ValueError(f"base_url has a malformed host: {url.host!r}")
        if url.port is not None and not 1 <= url.port <= 65535:
            raise ValueError(f"base_url port must be 1-65535, got {url.port}")
        if url.userinfo:
            # it would show wherever the URL does (reprs, logs, spans): keys go in api_key
            raise ValueError("base_url must not carry credentials: use api_key (or headers)")
        if url.query or url.fragment:
            raise ValueError("base_url must not have a query or fragment (use headers/params)")
        return value.rstrip("/")

    @field_validator("concurrency")
    @classmethod
    def _check_concurrency(cls, value: Literal["auto"] | StrictInt) -> Literal["auto"] | int:
        if isinstance(value, int) and value < 1:
            raise ValueError("concurrency must be 'auto' or an int >= 1")
        return value

    @field_validator("transport")
    @classmethod
    def _check_transport(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, httpx2.AsyncBaseTransport):
            raise ValueError("transport must be an httpx2.AsyncBaseTransport")
        return value

    @field_validator("concurrency_window")
    @classmethod
    def _check_window(cls, value: tuple[int, int] | str | None) -> tuple[int, int] | None:
        if value is None:
            return None
        if isinstance(value, str):
            from .scenarios import PRESETS

            preset = PRESETS.get(value)
            if preset is None or preset.concurrency_window is None:
                names = sorted(n for n, p in PRESETS.items() if p.concurrency_window)
                raise ValueError(f"unknown scenario window {value!r}; known: {names}")
            value = preset.concurrency_window
        low, high = value
        if not 1 <= low <= high:
            raise ValueError("concurrency_window must be (low, high) with 1 <= low <= high")
        return (low, high)

    @model_validator(mode="after")
    def _check_served(self) -> Backend:
        from .providers import PROVIDERS, unserved

        why = unserved(PROVIDERS[self.provider], self.base_url,
                       signals=self.signals_mode != "off", embedding_model=self.embedding_model)
        if why is not None:
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _check_fleet_key(self) -> Backend:
        if self.fleet_key is not None:
            check_fleet_key(self.fleet_key, self.resolve_api_key())
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> Backend:
        if self.min_concurrency > self.max_concurrency:
            raise ValueError("min_concurrency must be <= max_concurrency")
        if isinstance(self.concurrency, int) and self.concurrency > self.max_concurrency:
            # a fixed limit is its own ceiling: size the pool for it
            object.__setattr__(self, "max_concurrency", self.concurrency)
        return self

    @property
    def signals_mode(self) -> SignalsMode:
        """``signals`` resolved: ``"on"`` (True), ``"auto"`` (None on a preset whose server
        reports its load: read until shown not served), ``"off"`` (gptgate/signals_auto.py)."""
        from .providers import PROVIDERS
        from .signals_auto import signals_mode

        return signals_mode(PROVIDERS[self.provider], self.signals)

    @property
    def ceiling(self) -> int:
        """The most calls this backend may ever have in flight."""
        return self.concurrency if isinstance(self.concurrency, int) else self.max_concurrency

    @property
    def pool_size(self) -> int:
        return self.max_connections or pool_size_for(self.ceiling)

    @property
    def pseudo_concurrency(self) -> bool:
        """More concurrent calls allowed than connections: the extra ones only wait."""
        return self.ceiling > self.pool_size

    @field_serializer("headers")
    def _dump_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """Dumped by name only, as shown (``__repr_args__``): a configuration logged at start
        must not carry a proxy's token."""
        return {name: "***" for name in headers}

    def __repr_args__(self) -> Any:
        """``headers`` shown by name only: a proxy's token goes there as often as in
        ``api_key`` (which is never shown), and a backend is what people log."""
        for name, value in super().__repr_args__():
            yield name, ({k: "***" for k in value} if name == "headers" and value else value)

    def resolve_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get(self.api_key_env) or None


class _EnvURL(str):
    """A ``shared`` URL read from ``GPTGATE_SHARED``: its errors name the variable."""

    __slots__ = ()


class GatewayConfig(BaseModel):
    """Gateway-wide settings. ``Gateway(backends=[...], max_attempts=4)`` builds one.
    Numbers are finite, as in ``Backend`` (``None`` is "no deadline", "no budget")."""

    #: inputs stay out of errors: a ``shared=`` URL may carry a Redis password, a backend
    #: given as a dict its API key (the message still names the field and the rule)
    model_config = ConfigDict(
        frozen=True, arbitrary_types_allowed=True, extra="forbid", allow_inf_nan=False,
        hide_input_in_errors=True,
    )

    backends: list[Backend]
    #: tries per call, the first included; a move past a backend that can never run the
    #: request (its context window, its own key refused) is none (docs/guide/failover.md)
    max_attempts: StrictInt = Field(default=3, ge=1, le=20)
    backoff_base_s: StrictFloat = Field(default=0.5, gt=0)
    backoff_cap_s: StrictFloat = Field(default=8.0, gt=0)
    #: a server's retry-after longer than this fails the call instead of sleeping
    max_retry_after_s: StrictFloat = Field(default=60.0, gt=0)
    #: retries may be at most this share of calls over a sliding 10 s window (plus the floor
    #: below); when spent, calls fail fast with their original error. None disables it.
    retry_budget_ratio: StrictFloat | None = Field(default=0.1, ge=0)
    retry_budget_min_per_s: StrictFloat = Field(default=1.0, ge=0)
    #: consecutive failures that open a backend's circuit, and its first cool-down
    breaker_threshold: StrictInt = Field(default=5, ge=1)
    breaker_cooldown_s: StrictFloat = Field(default=5.0, gt=0)
    #: the cool-down doubles after each failed probe up to this (never below
    #: ``breaker_cooldown_s``): after a long outage, the most a recovered backend waits for its
    #: next probe — with steady traffic, up to this many seconds of failures past its return
    breaker_max_cooldown_s: StrictFloat = Field(default=60.0, gt=0)
    #: how long a call may wait for an open circuit to half-open when no other backend is
    #: eligible; beyond it the call fails fast (never past the call's own deadline)
    max_breaker_wait_s: StrictFloat = Field(default=5.0, ge=0)
    #: total deadline per call across queueing and attempts. None: no deadline, but no hang
    #: either — each attempt has its backend's timeout, and a wait for admission gives up when
    #: the queue has not moved for max_attempts × the largest backend ``timeout`` plus
    #: ``backoff_cap_s`` between attempts (``gate.default_deadline_s``; ``@gate.guard``'s wait
    #: for a permit too). A deadline never counts against a backend's health or limit
    #: (docs/guide.md, Deadlines).
    deadline_s: StrictFloat | None = Field(default=None, gt=0)
    #: a preset name (see ``gptgate.scenarios.PRESETS``)
    default_scenario: str = "default"
    #: put prompt and completion text on spans (off: prompts are often personal data)
    capture_content: bool = False
    #: random seed for back-off jitter (tests and benchmarks); None → system randomness
    seed: StrictInt | None = None
    #: opt-in: re-warm prompt prefixes that are still hot before the provider's cache TTL
    #: (5-10 min at OpenAI) lets them go cold; each refresh is a max_tokens=1 call, counted
    keep_warm: bool = False
    keep_warm_interval_s: StrictFloat = Field(default=240.0, gt=0)
    #: a prefix group is "hot" at this many calls per minute
    keep_warm_min_rate_per_min: StrictFloat = Field(default=2.0, gt=0)
    #: leaving ``async with gate``: how long calls in flight may still finish before they are
    #: cancelled with ``GatewayClosedError`` (``aclose(grace_s=...)`` overrides it)
    shutdown_grace_s: StrictFloat = Field(default=10.0, ge=0)
    #: ``Gateway(state=...)``: a saved state older than this starts cold (docs/adaptive.md,
    #: Warm start)
    state_max_age_s: StrictFloat = Field(default=86_400.0, gt=0)
    #: fleet-wide state through Redis (a URL or a ``gg.Shared``); None → ``GPTGATE_SHARED``
    #: if set, else each process alone (docs/guide.md, Many processes)
    shared: Shared | None = None
    #: a dollar budget per sliding hour, counted from the cost ledger (docs/budget.md)
    budget: Budget | None = None
    #: ``gate.embed``: how long concurrent calls wait to be merged into one request (0: off;
    #: docs/embeddings.md)
    embed_window_s: StrictFloat = Field(default=0.005, ge=0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _shared_from_env(cls, data: Any) -> Any:
        """``GPTGATE_SHARED`` configures a fleet without touching code (an explicit
        ``shared=`` wins; ``GPTGATE_SHARED=`` empty means none)."""
        if isinstance(data, dict) and "shared" not in data:
            url = os.environ.get("GPTGATE_SHARED", "").strip()
            if url:
                data = {**data, "shared": _EnvURL(url)}
        return data

    @field_validator("shared", mode="before")
    @classmethod
    def _shared_url(cls, value: Any) -> Any:
        """A bare URL is ``Shared(url)`` with the defaults; a bad one from the environment
        names the variable (the code never set ``shared``)."""
        if not isinstance(value, str):
            return value
        try:
            return Shared(url=str(value))
        except ValidationError as error:
            if not isinstance(value, _EnvURL):
                raise
            raise ValidationError.from_exception_data(error.title, [
                InitErrorDetails(
                    type="value_error", loc=e["loc"], input="",
                    ctx={"error": ValueError(
                        e["msg"].removeprefix("Value error, ")
                        + " (from the environment variable GPTGATE_SHARED)"
                    )},
                ) for e in error.errors()
            ], hide_input=True) from None

    @field_validator("default_scenario")
    @classmethod
    def _check_default_scenario(cls, value: str) -> str:
        from .scenarios import PRESETS

        if value not in PRESETS:
            raise ValueError(f"unknown scenario {value!r}; known: {', '.join(sorted(PRESETS))}")
        return value

    @field_validator("backends")
    @classmethod
    def _check_backends(cls, backends: list[Backend]) -> list[Backend]:
        if not backends:
            raise ValueError("at least one backend is required")
        names = [b.name for b in backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(duplicates)}")
        return backends

    @model_validator(mode="after")
    def _check_budget(self) -> GatewayConfig:
        if self.budget is None:
            return self
        from .prices import catalog_price  # it builds on this module

        if all(
            b.price is None and catalog_price(b.provider, b.model, b.base_url) is None
            for b in self.backends
        ):
            # nothing would ever be counted: a budget that cannot hold is a silent bill
            raise ValueError(
                "budget needs a backend with a price (Backend(price=gg.Price(...)), or a "
                "provider and model the genai-prices table knows)"
            )
        return self

    @model_validator(mode="after")
    def _check_backoff(self) -> GatewayConfig:
        if self.backoff_cap_s < self.backoff_base_s:
            raise ValueError("backoff_cap_s must be >= backoff_base_s")
        return self
