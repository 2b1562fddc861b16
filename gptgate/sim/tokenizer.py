"""The tokenizer the simulator models: a real one's rates, not the gateway's estimate.

The simulated servers count a prompt as a real server does, so that the gateway's estimate
(gptgate/token_scripts.py) can be wrong against them as against a real server — were both the
same function, a CJK prompt under-counted 3× by the gateway would be under-counted 3× by the
simulator too, and no benchmark could show the 429s it causes. The rates are o200k's (gpt-4o,
gpt-5), measured on the prompts of tests/scripts_text.py; an ASCII character stays a quarter
token, so every English figure of the named profiles is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gptgate.token_scripts import ScriptRates
from gptgate.tokens import estimate_prompt_tokens, estimate_text_tokens

__all__ = ["SIM_TOKENIZER", "sim_prompt_tokens", "sim_text_tokens"]

#: o200k's tokens per character (Chinese 0.64, Japanese 0.76, Russian 0.22, Hindi 0.29, …)
SIM_TOKENIZER = ScriptRates(
    latin=0.3, greek=0.4, cyrillic=0.25, hebrew=0.4, arabic=0.3,
    indic=0.35, symbols=0.25, cjk=0.7, hangul=0.65, astral=1.3,
)


def sim_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """The prompt tokens a simulated server counts for ``messages``."""
    return estimate_prompt_tokens(messages, rates=SIM_TOKENIZER)


def sim_text_tokens(text: str) -> int:
    """The tokens a simulated server counts for ``text``."""
    return estimate_text_tokens(text, SIM_TOKENIZER)
