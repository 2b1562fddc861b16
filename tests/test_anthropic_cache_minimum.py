"""Claude Opus 4.6 and 4.7 cache nothing below 4,096 tokens, as Opus 4.5 and Haiku 4.5
(Anthropic's prompt-caching page: "4,096 tokens for Claude Opus 4.7, Claude Opus 4.6, and
Claude Opus 4.5"). gptgate placed them at the 1,024 of Sonnet: a ~2,000-token system prompt
got a cache marker that writes nothing, and the prompt-cache gate held the prefix's calls for
a warm-up whose hits could never come (on Haiku 4.5 that was 109.5 s of simulated time for
a job a plain client ran in 19.4 s — docs/providers.md, "Cache markers")."""

from __future__ import annotations

import json
from typing import Any

import pytest

import gptgate as gg
from gptgate.wire.anthropic import AnthropicDialect, min_cacheable_tokens
from gptgate.wire.dialect import dialect_for

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 300}  # ~2,000 tokens
ASK = [SYSTEM, {"role": "user", "content": "Name a prime."}]


def _sent(model: str) -> dict[str, Any]:
    dialect = dialect_for(gg.Backend(name="a", provider="anthropic", model=model))
    assert isinstance(dialect, AnthropicDialect)
    body: dict[str, Any] = json.loads(dialect.build_body(model, ASK, {}, stream=False))
    return body


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-opus-4-7",
                                   "claude-opus-4-6-20260205", "claude-opus-4-5-20251101",
                                   "claude-haiku-4-5"])
def test_a_2000_token_prefix_is_not_marked_where_4096_is_the_minimum(model: str) -> None:
    assert min_cacheable_tokens(model) == 4096
    assert "cache_control" not in json.dumps(_sent(model))


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-sonnet-4-6", "claude-opus-4-1",
                                   "claude-opus-4-8"])
def test_where_1024_is_the_minimum_it_is_marked(model: str) -> None:
    assert min_cacheable_tokens(model) == 1024
    assert _sent(model)["system"][-1]["cache_control"] == {"type": "ephemeral"}
