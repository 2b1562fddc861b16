"""The token estimate by script (gptgate/token_scripts.py): a prompt in Chinese, Japanese,
Korean, Russian, Greek, Arabic, Hebrew, Hindi or Thai, or full of emoji, is estimated at
least at what a modern tokenizer (o200k: gpt-4o, gpt-5) counts, and half the estimate — what
a refusal counts — at most 1.25× it; an ASCII text's estimate is what it always was.

Before: ~4 characters a token for every script. The Chinese prompt of tests/scripts_text.py
(188 characters) was estimated at 47 tokens; o200k counts 121, cl100k 199."""

from __future__ import annotations

import json
import math

import pytest

from gptgate.token_scripts import ESTIMATE, ScriptRates, script_counts, text_chars
from gptgate.tokens import estimate_prompt_tokens, estimate_text_tokens, estimate_tools_tokens
from tests.scripts_text import OTHER_SCRIPTS, PROMPTS, REAL_TOKENS


@pytest.mark.parametrize("name", OTHER_SCRIPTS)
def test_another_script_is_not_under_counted(name: str) -> None:
    o200k, _ = REAL_TOKENS[name]
    estimate = estimate_text_tokens(PROMPTS[name])
    assert o200k <= estimate <= 1.4 * o200k, (estimate, o200k)  # over: a job paced slower


@pytest.mark.parametrize("name", list(PROMPTS))
def test_what_a_refusal_counts_over_counts_by_at_most_a_quarter(name: str) -> None:
    # a refusal (context window, TPM limit, the router's window check) counts half the
    # estimate: a call that fits must not be refused
    o200k, _ = REAL_TOKENS[name]
    assert estimate_text_tokens(PROMPTS[name]) // 2 <= 1.25 * o200k


@pytest.mark.parametrize(
    "text", ["", "a", "abcd", "abcde", "Hello, world!\n" * 37, "x" * 100_003, '{"k": [1, 2]}']
)
def test_an_ascii_text_is_estimated_as_before(text: str) -> None:
    assert text_chars(text) == len(text)
    assert estimate_text_tokens(text) == math.ceil(len(text) / 4)


def test_a_chinese_chat_prompt_is_estimated_by_its_characters() -> None:
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": PROMPTS["zh"]}]
    o200k = REAL_TOKENS["zh"][0]
    assert estimate_prompt_tokens(messages) >= o200k + 8 + len("You are a support agent.") // 4


def test_non_ascii_tool_arguments_count_their_characters_not_their_json_escapes() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "description": "查询天气" * 50}}]
    compact = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    assert estimate_tools_tokens(tools) == math.ceil(text_chars(compact) / 4)
    assert estimate_tools_tokens(tools) < math.ceil(len(json.dumps(tools)) / 4)


def test_scripts_are_told_apart_by_their_characters() -> None:
    text = "Hi 你好 мир ½ 👍 — नमस्ते"
    counts = script_counts(text)
    assert (counts["cjk"], counts["cyrillic"], counts["astral"], counts["symbols"]) == (2, 3, 1, 1)
    assert (counts["latin"], counts["indic"], counts["ascii"]) == (1, 6, 2 + 6)
    assert sum(counts.values()) == len(text)


def test_a_lone_surrogate_is_sized_not_an_error() -> None:
    # json.loads('"\\ud83d"') — half an emoji, as a cut JSON string can hold
    # encoded as is: three bytes led by 0xED, Hangul's range
    assert text_chars("\ud83d ok") == len(" ok") + math.ceil(4 * ESTIMATE.rates["hangul"])


def test_rates_name_every_script() -> None:
    with pytest.raises(ValueError, match="cjk"):
        ScriptRates(cjk=1.0)
    assert text_chars("你好", ESTIMATE) == math.ceil(2 * 4 * ESTIMATE.rates["cjk"])
