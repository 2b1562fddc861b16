"""``Backend(provider=...)`` and ``gg.PROVIDERS`` (issue 32): the presets' defaults, the
provider validated as a field, and the dialect seam the call path asks (URL, auth, parameter
rules) — over a MockTransport that records what reached the backend."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from pydantic import ValidationError

import gptgate as gg
from gptgate.wire import OpenAIDialect, dialect_for

from .mockbackend import USER, Script, gateway, ok

ISSUE_PROVIDERS = [
    "openai", "azure", "anthropic", "deepseek", "gemini", "groq", "openrouter", "together",
    "mistral", "vllm", "sglang", "llamacpp", "ollama", "lmstudio",
]


def _backend(script: Script, **kwargs: Any) -> gg.Backend:
    options: dict[str, Any] = {
        "name": "b", "model": "m", "concurrency": 4, "timeout": 5.0,
        "transport": httpx2.MockTransport(script),
    }
    options.update(kwargs)
    return gg.Backend(**options)


def test_every_provider_of_the_issue_has_a_preset() -> None:
    assert list(gg.PROVIDERS) == ISSUE_PROVIDERS
    for name, preset in gg.PROVIDERS.items():
        assert preset.name == name
        assert preset.api_key_env.endswith(("_API_KEY",))
        assert preset.hosted == (preset.base_url is None or preset.base_url.startswith("https:"))
    with pytest.raises(TypeError):
        gg.PROVIDERS["x"] = gg.PROVIDERS["openai"]  # type: ignore[index]


def test_unknown_provider_is_a_validation_error_naming_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        gg.Backend(name="b", base_url="http://h/v1", model="m", provider="openia")
    (error,) = info.value.errors()
    assert error["loc"] == ("provider",)
    assert "openia" in error["msg"] and "openai" in error["msg"]


@pytest.mark.parametrize(
    ("provider", "url", "env"),
    [
        ("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("deepseek", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
        ("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
        ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        ("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
        ("vllm", "http://localhost:8000/v1", "VLLM_API_KEY"),
        ("ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY"),
    ],
)
def test_a_preset_gives_base_url_and_key_variable(provider: str, url: str, env: str) -> None:
    backend = gg.Backend(name="b", provider=provider, model="m")
    assert (backend.base_url, backend.api_key_env) == (url, env)


def test_explicit_values_beat_the_preset() -> None:
    backend = gg.Backend(
        name="b", provider="vllm", base_url="http://gpu:9000/v1", model="m", api_key_env="MINE"
    )
    assert (backend.base_url, backend.api_key_env) == ("http://gpu:9000/v1", "MINE")


def test_azure_needs_its_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    with pytest.raises(ValidationError) as info:
        gg.Backend(name="az", provider="azure", deployment="d")
    assert [e["loc"] for e in info.value.errors()] == [("base_url",)]
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com")
    backend = gg.Backend(name="az", provider="azure", deployment="gpt-4o-prod")
    assert backend.base_url == "https://res.openai.azure.com"
    assert backend.model == "gpt-4o-prod"  # the deployment names the model
    assert backend.api_version == gg.providers.AZURE_API_VERSION


@pytest.mark.parametrize("field", ["deployment", "api_version", "azure_ad_token_provider"])
def test_azure_fields_elsewhere_are_refused(field: str) -> None:
    value: Any = (lambda: "t") if field == "azure_ad_token_provider" else "x"
    with pytest.raises(ValidationError) as info:
        gg.Backend(name="b", provider="openai", model="m", **{field: value})
    assert [e["loc"] for e in info.value.errors()] == [(field,)]


def test_default_dialect_is_the_openai_wire_with_a_bearer_key() -> None:
    dialect = dialect_for(gg.Backend(name="b", base_url="http://h:1/v1", model="m"))
    assert isinstance(dialect, OpenAIDialect) and not dialect.checked
    assert dialect.auth_headers("k") == {"authorization": "Bearer k"}
    assert dialect.auth_headers(None) == {}
    url = dialect.chat_url(httpx2.URL("http://h:1/v1/"))
    assert str(url) == "http://h:1/v1/chat/completions"


async def test_a_rejected_parameter_is_refused_before_anything_is_sent() -> None:
    script = Script(ok())
    async with gateway(_backend(script, provider="gemini", base_url="http://h/v1")) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, frequency_penalty=0.5)
        assert "'gemini'" in info.value.message and "'frequency_penalty'" in info.value.message
        assert script.requests == []
        r = await gate.chat(USER, temperature=0)  # the gateway goes on serving
        assert r.text == "hi there"
        assert gate.stats()["b"].failures == 0  # the caller's mistake, not the backend's


async def test_a_silently_ignored_parameter_is_refused_too() -> None:
    script = Script(ok())
    async with gateway(_backend(script, provider="ollama")) as gate:
        with pytest.raises(gg.BadRequestError, match="silently ignores the parameter 'num_ctx'"):
            await gate.chat(USER, num_ctx=32768)
    assert script.requests == []


async def test_extra_body_sends_what_the_rules_refuse() -> None:
    script = Script(ok())
    async with gateway(_backend(script, provider="gemini", base_url="http://h/v1")) as gate:
        await gate.chat(USER, max_tokens=5, extra_body={"frequency_penalty": 0.5, "top_k": 3})
    (body,) = script.bodies
    assert body["frequency_penalty"] == 0.5 and body["top_k"] == 3 and body["max_tokens"] == 5
    assert "extra_body" not in body and body["model"] == "m"


async def test_extra_body_must_be_a_mapping() -> None:
    script = Script(ok())
    async with gateway(_backend(script, base_url="http://h/v1")) as gate:
        with pytest.raises(gg.BadRequestError, match="extra_body"):
            await gate.chat(USER, extra_body=["top_k"])
    assert script.requests == []


async def test_the_provider_key_variable_is_sent_and_not_openais(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A self-hosted server never gets the OpenAI key from the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("VLLM_API_KEY", "local-token")
    script = Script(ok())
    async with gateway(_backend(script, provider="vllm")) as gate:
        await gate.chat(USER)
    (request,) = [r for r in script.requests if r.method == "POST"]
    # the signals reads too (on by default for vllm): never the OpenAI key
    assert {r.headers["authorization"] for r in script.requests} == {"Bearer local-token"}
    assert str(request.url) == "http://localhost:8000/v1/chat/completions"
    assert json.loads(request.content)["messages"] == USER


def test_the_config_file_takes_the_same_names(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    path = tmp_path / "gate.toml"
    path.write_text(
        '[[backends]]\nname = "az"\nprovider = "azure"\n'
        'base_url = "https://res.openai.azure.com"\ndeployment = "gpt-4o-prod"\n'
        'api_version = "2025-01-01-preview"\n\n'
        '[[backends]]\nname = "g"\nprovider = "gemini"\nmodel = "gemini-2.5-flash"\n'
    )
    config = gg.load_config(path)
    az, gemini = config.backends
    assert (az.provider, az.deployment, az.api_version, az.model, az.api_key_env) == (
        "azure", "gpt-4o-prod", "2025-01-01-preview", "gpt-4o-prod", "AZURE_OPENAI_API_KEY"
    )
    assert gemini.base_url == gg.PROVIDERS["gemini"].base_url
    path.write_text('[[backends]]\nname = "x"\nprovider = "gemni"\nmodel = "m"\n')
    with pytest.raises(gg.ConfigFileError, match=r"backends\.0\.provider: .*unknown provider"):
        gg.load_config(path)


def test_every_provider_has_its_section_in_the_docs() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "providers.md").read_text()
    for name in gg.PROVIDERS:
        assert f"`provider=\"{name}\"`" in page or f"provider=\"{name}\"" in page, name
        assert f"| `{name}` |" in page, name  # the table's row
