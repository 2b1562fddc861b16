"""``/v1/embeddings`` on the simulator: deterministic vectors, an input cap, a bill.

Why its own module: an embeddings request is one step (no prefill/decode timeline, no
stream), so the engine's chat machinery has nothing to offer it but the ledger. The vector of
a text is a function of the text alone (a hash seeds it), so a test can compare what a
coalescing client got against one request per text; ``dimensions`` sets its length (as
OpenAI's text-embedding-3 models shorten theirs), else ``embedding_dimensions``. A request
over the profile's ``embedding_max_inputs`` is the provider's 400, as OpenAI answers more
than 2,048 inputs, and so is one holding an input over ``embedding_max_input_tokens``
(8,192, OpenAI's models'). Each request holds one of the engine's slots for
``embedding_request_s`` plus ``embedding_per_input_s`` per input: the per-request overhead
is what merging saves.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
import weakref
from typing import TYPE_CHECKING, Any

from gptgate.sim import wire
from gptgate.sim.tokenizer import sim_text_tokens

if TYPE_CHECKING:
    from gptgate.sim.engine import SimEngine, SimResponse

__all__ = ["EMBEDDING_PATHS", "answer_embeddings", "vector_for"]

EMBEDDING_PATHS = frozenset({"/v1/embeddings", "/embeddings"})
_SLOTS: weakref.WeakKeyDictionary[SimEngine, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def vector_for(text: str, dimensions: int) -> list[float]:
    """The simulator's embedding of ``text``: unit-free floats in [-1, 1), from its hash."""
    out: list[float] = []
    counter = 0
    while len(out) < dimensions:
        digest = hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=32).digest()
        out.extend(v / 2**31 for v in struct.unpack("<8i", digest))
        counter += 1
    return out[:dimensions]


def _inputs(body: bytes) -> tuple[str, list[str], int | None] | str:
    """The request's model, inputs and ``dimensions`` (None: the model's own), or why it is
    a 400."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return "We could not parse the JSON body of your request."
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return "you must provide a model parameter"
    raw = data.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        return "'$.input' is invalid: expected a string or a non-empty array of strings"
    if not all(isinstance(t, str) and t for t in texts):
        return "'$.input' is invalid: every input must be a non-empty string"
    dimensions = data.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        return f"Invalid value for 'dimensions' = {dimensions!r}. Must be an integer >= 1."
    return data["model"], texts, dimensions


async def answer_embeddings(
    engine: SimEngine, body: bytes, base: list[tuple[str, str]]
) -> SimResponse:
    """One embeddings request: a 400 for a bad or over-cap body, else the vectors in order
    and ``usage.prompt_tokens`` (billed in the engine's ledger)."""
    from gptgate.sim.engine import SimResponse

    profile = engine.profile
    parsed = _inputs(body)
    if isinstance(parsed, str):
        engine.ledger.record("client_error")
        return _bad_request(base, parsed, profile.flavor)
    model, texts, dimensions = parsed
    if len(texts) > profile.embedding_max_inputs:
        engine.ledger.record("client_error")
        message = (
            f"'$.input' is too long: {len(texts)} inputs, the most one request takes is "
            f"{profile.embedding_max_inputs}"
        )
        return _bad_request(base, message, profile.flavor)
    sizes = [sim_text_tokens(t) for t in texts]
    longest = profile.embedding_max_input_tokens
    if longest is not None and max(sizes) > longest:
        engine.ledger.record("client_error")
        message = (
            f"This model's maximum context length is {longest} tokens, however you requested "
            f"{max(sizes)} tokens ({max(sizes)} in your prompt; 0 for the completion). Please "
            "reduce your prompt; or completion length."
        )
        return _bad_request(base, message, profile.flavor)
    tokens = sum(sizes)
    base, refused = engine.admit_rate(tokens, base)  # a provider's RPM/TPM counts these too
    if refused is not None:
        return refused
    slots = _SLOTS.get(engine)
    if slots is None:
        slots = _SLOTS[engine] = asyncio.Semaphore(profile.slots * profile.replicas)
    async with slots:
        try:
            await engine.clock.sleep(
                profile.embedding_request_s + profile.embedding_per_input_s * len(texts)
            )
        except BaseException:
            engine.ledger.record("abandoned", input_tokens=tokens)
            raise
    engine.ledger.record("ok", input_tokens=tokens)
    dims = dimensions or profile.embedding_dimensions  # text-embedding-3's shortened vectors
    payload = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": vector_for(t, dims)}
            for i, t in enumerate(texts)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    out = wire.dumps(payload).encode()
    return SimResponse.json(200, out, base)


def _bad_request(base: list[tuple[str, str]], message: str, flavor: str) -> SimResponse:
    from gptgate.sim.engine import SimResponse

    out = wire.error_body(400, message, "invalid_request_error", param="input", flavor=flavor)
    return SimResponse.json(400, out, base)
