"""Deterministic pseudo-text and output lengths, cheap enough for 100,000 calls.

Each response is a slice of one fixed corpus, starting at a word chosen by a hash of (engine
seed, request body): generating it costs a string slice, not a random draw per word. A slice
of ``4·n`` characters estimates to exactly ``n`` tokens with :func:`estimate_text_tokens`, so
the client's estimate of an interrupted stream and the simulator's bill agree.
"""

from __future__ import annotations

import hashlib
import math
import random
from functools import cache
from statistics import NormalDist

from gptgate.tokens import CHARS_PER_TOKEN

__all__ = ["RequestDraw", "draw_for", "output_text"]

_WORD_TEXT = (
    "the a of to and in is that for on with as by it this be are from at or an was which "
    "model token cache batch prefix latency request server client stream queue replica "
    "throughput concurrency budget retry window prompt answer system user context memory "
    "decode prefill kernel tensor shard router gateway limit rate minute second signal "
    "curve knee load slot price cost bill result value field report measure sample data "
    "warm cold fast slow early late high low first last small large simple careful steady "
    "runs holds moves grows falls waits sends reads keeps finds shows needs gives takes "
)
_WORDS = _WORD_TEXT.split()

_CORPUS_CHARS = 1 << 16
_NORMAL = NormalDist()


@cache
def _corpus() -> tuple[str, tuple[int, ...]]:
    """The corpus (doubled, so any slice up to its length needs no wrap) and word starts."""
    rng = random.Random(0x6A7E)
    words: list[str] = []
    size = 0
    sentence = 0
    while size < _CORPUS_CHARS:
        w = rng.choice(_WORDS)
        if sentence == 0:
            w = w.capitalize()
        sentence += 1
        if sentence >= rng.randint(6, 16):
            w += "."
            sentence = 0
        elif rng.random() < 0.08:
            w += ","
        words.append(w)
        size += len(w) + 1
    text = " ".join(words) + " "
    starts: list[int] = [0]
    for i, ch in enumerate(text):
        if ch == " " and i + 1 < len(text):
            starts.append(i + 1)
    return text + text, tuple(starts)


def output_text(key: int, tokens: int) -> str:
    """``tokens`` tokens (``4·tokens`` chars) of pseudo-text selected by ``key``."""
    doubled, starts = _corpus()
    n_chars = tokens * CHARS_PER_TOKEN
    start = starts[key % len(starts)]
    half = len(doubled) // 2
    if n_chars <= half:
        return doubled[start : start + n_chars]
    reps = n_chars // half + 2
    return (doubled[start:half] + doubled[:half] * reps)[:n_chars]


class RequestDraw:
    """The seeded, per-request content decisions: text key and natural output length."""

    __slots__ = ("output_tokens", "text_key", "unit")

    def __init__(self, text_key: int, output_tokens: int, unit: float) -> None:
        self.text_key = text_key
        self.output_tokens = output_tokens
        #: a further uniform draw in (0, 1), e.g. where an overload failure strikes
        self.unit = unit


def draw_for(seed: int, body: bytes, mean: float, sigma: float, maximum: int) -> RequestDraw:
    """Lognormal output length (mean ``mean``) and text key, both from (seed, body)."""
    digest = hashlib.blake2b(body, digest_size=24, key=(seed % 2**64).to_bytes(8, "big"))
    d = digest.digest()
    text_key = int.from_bytes(d[:8], "big")
    u = (int.from_bytes(d[8:16], "big") + 0.5) / 2.0**64
    unit = (int.from_bytes(d[16:24], "big") + 0.5) / 2.0**64
    mu = math.log(mean) - sigma * sigma / 2.0
    length = math.exp(mu + sigma * _NORMAL.inv_cdf(u)) if sigma else mean
    return RequestDraw(text_key, max(1, min(maximum, round(length))), unit)
