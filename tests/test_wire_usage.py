"""Every provider's usage shape reads into one Usage, nothing counted twice or dropped
(issue 32: LiteLLM #5017/#16009 DeepSeek's cache unread, #9812/#11364/#5443 Anthropic's cache
tokens double-counted or mispriced)."""

from __future__ import annotations

import httpx2
import pytest

import gptgate as gg
from gptgate.observe import ResponseTap
from gptgate.wire import parse_usage
from gptgate.wire.usage import parse_anthropic_usage
from tests.mockbackend import USER, Script, backend, gateway


def _usage(**counts: int) -> gg.Usage:
    return gg.Usage(**counts)  # type: ignore[arg-type]


def test_openai_cached_and_reasoning_tokens_are_parts_of_their_totals() -> None:
    body = {
        "prompt_tokens": 2_000, "completion_tokens": 300, "total_tokens": 2_300,
        "prompt_tokens_details": {"cached_tokens": 1_536, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256},
    }
    assert parse_usage(body) == _usage(
        input_tokens=2_000, cached_input_tokens=1_536, output_tokens=300, reasoning_tokens=256
    )


def test_responses_api_shape() -> None:
    body = {
        "input_tokens": 900, "output_tokens": 80,
        "input_tokens_details": {"cached_tokens": 512},
        "output_tokens_details": {"reasoning_tokens": 64},
    }
    assert parse_usage(body) == _usage(
        input_tokens=900, cached_input_tokens=512, output_tokens=80, reasoning_tokens=64
    )


def test_deepseek_cache_hits_are_read_once() -> None:
    # DeepSeek's own shape: hit + miss = prompt_tokens; newer replies repeat the hits in
    # prompt_tokens_details — counted once, not twice
    body = {
        "prompt_tokens": 1_000, "completion_tokens": 50, "total_tokens": 1_050,
        "prompt_cache_hit_tokens": 768, "prompt_cache_miss_tokens": 232,
        "prompt_tokens_details": {"cached_tokens": 768},
    }
    assert parse_usage(body) == _usage(
        input_tokens=1_000, cached_input_tokens=768, output_tokens=50
    )
    del body["prompt_tokens_details"]
    assert parse_usage(body) == _usage(
        input_tokens=1_000, cached_input_tokens=768, output_tokens=50
    )


def test_deepseek_hit_and_miss_without_prompt_tokens_add_up() -> None:
    body = {"completion_tokens": 5, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}
    assert parse_usage(body) == _usage(input_tokens=100, cached_input_tokens=64, output_tokens=5)


def test_anthropic_cache_reads_and_writes_come_on_top_of_input_tokens() -> None:
    body = {
        "input_tokens": 120, "output_tokens": 40,
        "cache_read_input_tokens": 5_000, "cache_creation_input_tokens": 2_000,
    }
    expected = _usage(
        input_tokens=7_120, cached_input_tokens=5_000, cache_write_input_tokens=2_000,
        output_tokens=40,
    )
    assert parse_usage(body) == expected
    assert parse_anthropic_usage(body) == expected
    # Anthropic sends null for a cache it did not touch
    body.update(cache_read_input_tokens=None, cache_creation_input_tokens=None)
    assert parse_usage(body) == _usage(input_tokens=120, output_tokens=40)


def test_a_proxy_that_adds_anthropic_names_beside_prompt_tokens_is_not_double_counted() -> None:
    # LiteLLM's OpenAI-format answer for a Claude model: prompt_tokens already holds the cache
    body = {
        "prompt_tokens": 7_120, "completion_tokens": 40,
        "cache_read_input_tokens": 5_000, "cache_creation_input_tokens": 2_000,
        "prompt_tokens_details": {"cached_tokens": 5_000},
    }
    assert parse_usage(body) == _usage(
        input_tokens=7_120, cached_input_tokens=5_000, cache_write_input_tokens=2_000,
        output_tokens=40,
    )


def test_openrouter_cache_writes_are_read() -> None:
    body = {
        "prompt_tokens": 3_000, "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2_900},
    }
    assert parse_usage(body) == _usage(
        input_tokens=3_000, cache_write_input_tokens=2_900, output_tokens=10
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # more cached than prompt (seen on proxies): clamped
            {"prompt_tokens": 10, "completion_tokens": 1,
             "prompt_tokens_details": {"cached_tokens": 50}},
            _usage(input_tokens=10, cached_input_tokens=10, output_tokens=1),
        ),
        (  # writes past what is left after reads: clamped
            {"prompt_tokens": 10, "prompt_cache_hit_tokens": 6,
             "prompt_tokens_details": {"cache_write_tokens": 9}},
            _usage(input_tokens=10, cached_input_tokens=6, cache_write_input_tokens=4),
        ),
        (  # reasoning above the output: clamped
            {"prompt_tokens": 1, "completion_tokens": 3,
             "completion_tokens_details": {"reasoning_tokens": 7}},
            _usage(input_tokens=1, output_tokens=3, reasoning_tokens=3),
        ),
    ],
)
def test_parts_never_exceed_their_whole(body: dict[str, object], expected: gg.Usage) -> None:
    assert parse_usage(body) == expected


def test_no_counts_is_no_usage() -> None:
    assert parse_usage({}) is None
    assert parse_usage({"prompt_cache_miss_tokens": "x"}) is None
    assert parse_usage(None) is None


def test_sdk_traffic_keeps_cached_tokens() -> None:
    """gate.http_client traffic: the tap kept only input and output tokens, so a cached
    prompt was billed at the full input price."""
    tap = ResponseTap("application/json", 0.0)
    tap.feed(
        b'{"id":"x","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":5,'
        b'"prompt_cache_hit_tokens":900,"prompt_cache_miss_tokens":100}}',
        0.1,
    )
    tap.close(0.1)
    assert tap.usage == _usage(input_tokens=1_000, cached_input_tokens=900, output_tokens=5)


DEEPSEEK_PRICE = gg.Price(input_per_mtok=0.27, cached_input_per_mtok=0.07, output_per_mtok=1.1)


async def test_a_deepseek_shaped_answer_is_billed_at_its_cache_price() -> None:
    """The issue's report: on a DeepSeek-shaped server the ledger counted 0 cached tokens."""
    completion = {
        "id": "c", "object": "chat.completion", "model": "deepseek-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4_000, "completion_tokens": 100, "total_tokens": 4_100,
                  "prompt_cache_hit_tokens": 3_840, "prompt_cache_miss_tokens": 160},
    }
    script = Script(httpx2.Response(200, json=completion))
    async with gateway(backend(script, price=DEEPSEEK_PRICE)) as gate:
        result = await gate.chat(USER, max_tokens=200)
        stats = gate.stats()["mock"]
    assert stats.cached_input_tokens == 3_840
    assert result.cost_usd == pytest.approx((160 * 0.27 + 3_840 * 0.07 + 100 * 1.1) / 1e6)
