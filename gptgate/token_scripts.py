"""A text's size in ~4-character tokens, by its script: what ``len(text) / 4`` is for English.

Why: ``len(text) / 4`` is English's rule (OpenAI: "one token ≈ 4 characters of common English
text"). Real tokenizers spend more on other scripts: against o200k a Chinese, Japanese or
Korean prompt was under-counted 2–3×, a Greek, Hebrew, Hindi or Thai one 1.1–1.5×, an emoji
one 2× (against cl100k, 1.7–3.5× on every one of them) — everywhere the estimate steers
something: the rate-limit
(TPM) reservation (too little reserved → 429s), the dollar budget's reservation, the
context-window check and routing (a Chinese prompt sent to a backend it cannot fit), an
interrupted stream's billed output in the ledger, micro-batch and Batch API sizes.

:func:`text_chars` gives a text's size in *ASCII-equivalent characters* — 4 to a token — so
every ``tokens_for_chars(len(text))`` becomes ``tokens_for_chars(text_chars(text))`` and an
ASCII text's figure does not move (``text_chars(s) == len(s)``). A character of another script
counts its script's tokens per character × 4.

The rates (tokens per character; :data:`ESTIMATE`), measured on the prompts of
tests/scripts_text.py with OpenAI's o200k (gpt-4o, gpt-5) and cl100k (gpt-4) tokenizers
(offline, the ``bpe-openai`` package), and checked against published figures:

============================  =========  ======  ========  ==================================
script (UTF-8 lead byte)      o200k      cl100k  estimate  published
============================  =========  ======  ========  ==================================
Chinese, Japanese (E3–E9)     0.64–0.76  ~1.07   0.8       DeepSeek: a Chinese character ≈
                                                           0.6 token; masonailab.com
                                                           (tiktoken): CJK takes 1.1–2.2×
                                                           English's tokens on o200k,
                                                           1.6–2.9× on cl100k
Korean Hangul (EA–ED)         0.63       1.14    0.7
Cyrillic (D0–D5)              0.22–0.31  ~0.5    0.32
Greek (CE–CF)                 0.39       1.04    0.45
Hebrew (D6–D7)                0.40       1.16    0.45
Arabic (D8–DF)                0.26       0.81    0.3
Devanagari, Thai … (E0–E1)    0.29–0.38  ~1.05   0.4
accented Latin (C2–CD)        ~0.25      ~0.3    0.4       a few a line in French or German
punctuation, symbols (E2)     ~0         ~0      0.4       ’ “ ” — … merge with their words
emoji, other astral (F0–F4)   1.3        2.2     1.6       1–3 tokens an emoji
other BMP (EE–EF)             —          —       0.8       CJK compatibility, full width
============================  =========  ======  ========  ==================================

Two bounds pick each rate. *Not under o200k*, the tokenizer of the models a gateway most
often fronts (gpt-4o, gpt-4.1, gpt-5, the o-series): a TPM reservation holds enough and a
dollar budget is not overrun — on the simulator, a job of Chinese prompts under a TPM limit
met 98 429s before, none after (benchmarks/token_scripts.py). *Not far over it* (~1.05–1.35×):
a reservation too large holds the rate budget idle — the same job in Russian, whose old
estimate matched o200k, ran ~9% slower at 0.32 than at 0.25, and 60% slower at 0.5. A refusal
(the context window, a TPM limit, the router's window check) counts half the estimate
(``prompt // 2``: a real tokenizer may need half as many of English's tokens), so it never
over-counts: at most 0.65× o200k on every script above, and a call that fits is not refused.
Older or other vocabularies spend more — cl100k (gpt-4, gpt-3.5) 1.3–2.6× the estimate on
these scripts, and Claude's and Llama's tokenizers are reported between the two: their
reservations are still 2–3× closer than the old ~4 characters, and each is reconciled with
the server's count when the call ends.

Cost: no tokenizer runs on the event loop (LiteLLM #36174: one stalled it for seconds). An
ASCII text is ``str.isascii()`` (a C scan, ~0.02 ms per MB) and ``len``; another is encoded to
UTF-8, its continuation bytes dropped and its lead bytes mapped to a script by one
``bytes.translate``, and each script present counted with ``bytes.count`` (an absent one
costs a ``memchr``) — all C loops, O(n). On 1 MB of text (benchmarks/token_scripts.py, this
project's 2-core machine): ~0 ms for English, 2–3 ms for Chinese, Japanese, Russian or emoji,
~7 ms for Hindi; o200k's own tokenizer takes 150–310 ms on the same text.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["ESTIMATE", "SCRIPTS", "ScriptRates", "script_counts", "text_chars"]

#: the scripts told apart, each with the UTF-8 lead bytes of its characters
SCRIPTS: Mapping[str, tuple[range, ...]] = MappingProxyType({
    "latin": (range(0xC2, 0xCE),),  # U+0080–U+036F: accents, Latin extended, IPA, diacritics
    "greek": (range(0xCE, 0xD0),),  # U+0380–U+03FF
    "cyrillic": (range(0xD0, 0xD6),),  # U+0400–U+05BF (Cyrillic, Armenian)
    "hebrew": (range(0xD6, 0xD8),),  # U+0580–U+05FF
    "arabic": (range(0xD8, 0xE0),),  # U+0600–U+07FF (Arabic, Syriac, Thaana, N'Ko)
    "indic": (range(0xE0, 0xE2),),  # U+0800–U+1FFF (Devanagari … Thai, Lao, Tibetan, Myanmar)
    "symbols": (range(0xE2, 0xE3),),  # U+2000–U+2FFF: punctuation, arrows, dingbats
    "cjk": (range(0xE3, 0xEA), range(0xEE, 0xF0)),  # U+3000–U+9FFF, U+E000–U+FFFF
    "hangul": (range(0xEA, 0xEE),),  # U+A000–U+DFFF (Yi, Hangul syllables)
    "astral": (range(0xF0, 0xF8),),  # U+10000 up: emoji, CJK extension B
})

_NAMES = tuple(SCRIPTS)
#: each byte's script as one byte (its index + 1); continuation bytes 0x80–0xBF are dropped
_TABLE = bytes(
    next((i + 1 for i, name in enumerate(_NAMES) for r in SCRIPTS[name] if b in r), 0)
    for b in range(256)
)
_CONTINUATION = bytes(range(0x80, 0xC0))
_CODES = tuple(bytes([i + 1]) for i in range(len(_NAMES)))


class ScriptRates:
    """Tokens per character of each script of :data:`SCRIPTS` (an ASCII character is a
    quarter token): the gateway's :data:`ESTIMATE`, or the tokenizer the simulator models."""

    __slots__ = ("rates", "weights")

    def __init__(self, **rates: float) -> None:
        if set(rates) != set(SCRIPTS):
            raise ValueError(f"rates for exactly these scripts: {', '.join(SCRIPTS)}")
        self.rates: Mapping[str, float] = MappingProxyType(dict(rates))
        #: per script, in 1/1000 of an ASCII character (4,000 to a token)
        self.weights = tuple(round(4000 * rates[name]) for name in _NAMES)

    def __repr__(self) -> str:
        return f"ScriptRates({', '.join(f'{k}={v}' for k, v in self.rates.items())})"


#: the gateway's estimate (see the module docstring for the sources)
ESTIMATE = ScriptRates(
    latin=0.4, greek=0.45, cyrillic=0.32, hebrew=0.45, arabic=0.3,
    indic=0.4, symbols=0.4, cjk=0.8, hangul=0.7, astral=1.6,
)


def script_counts(text: str) -> dict[str, int]:
    """The characters of each script in ``text`` (ASCII under ``"ascii"``; C loops only)."""
    if text.isascii():
        return {"ascii": len(text)}
    leads = _leads(text)
    counts = {
        name: leads.count(code) if code in leads else 0
        for name, code in zip(_NAMES, _CODES, strict=True)
    }
    return {"ascii": len(leads) - sum(counts.values()), **counts}


def text_chars(text: str, rates: ScriptRates = ESTIMATE) -> int:
    """``text``'s size in ASCII-equivalent characters, 4 to a token: ``len(text)`` for ASCII,
    and ``4 × rates[script]`` for each character of another script (rounded up)."""
    if text.isascii():
        return len(text)
    leads = _leads(text)
    # ``in`` first: a script absent costs a memchr (~0.02 ms a MB), not a count (~2 ms)
    counts = [leads.count(code) if code in leads else 0 for code in _CODES]
    other = sum(n * w for n, w in zip(counts, rates.weights, strict=True))
    return len(leads) - sum(counts) + (other + 999) // 1000


def _leads(text: str) -> bytes:
    """One byte a character: its script's code (0: ASCII). A lone surrogate (JSON's
    ``"\\ud83d"``) is encoded as is, not an error."""
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = text.encode("utf-8", "surrogatepass")
    return encoded.translate(_TABLE, _CONTINUATION)
