"""OpenAI wire format as the simulator writes it: bodies, SSE chunks, errors, usage.

Chunks are built from a per-response string template (one ``json.dumps`` of the text piece per
chunk) because a benchmark pushes 100,000 responses through this code and measures the
*client's* CPU; the simulator must stay out of the way. The ``llamacpp`` flavor reproduces
llama-server's quirks: a role-only first chunk with ``"content": null``, a ``timings`` object,
errors carrying a numeric ``code``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DONE",
    "ChunkWriter",
    "ResponseMeta",
    "completion_body",
    "dumps",
    "error_body",
    "timings",
    "usage",
]

DONE = "data: [DONE]\n\n"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def error_body(
    status: int,
    message: str,
    type_: str,
    *,
    code: str | None = None,
    param: str | None = None,
    flavor: str = "openai",
    extra: dict[str, Any] | None = None,
) -> bytes:
    """An error body: OpenAI's ``{"error": {message, type, param, code}}`` or llama.cpp's
    ``{"error": {code: <status>, message, type}}``."""
    if flavor == "llamacpp":
        err: dict[str, Any] = {"code": status, "message": message, "type": type_}
    elif flavor == "azure":  # {"code": "429" | "DeploymentNotFound", "message": ...}
        err = {"code": code if code and not code.startswith("rate_limit") else str(status),
               "message": message}
    else:
        err = {"message": message, "type": type_, "param": param, "code": code}
    if extra:
        err.update(extra)
    return dumps({"error": err}).encode()


def usage(prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def timings(
    prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float, cache_n: int
) -> dict[str, Any]:
    """llama-server's non-standard ``timings`` object."""
    prompt_ms = prompt_s * 1000.0
    predicted_ms = predicted_s * 1000.0
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(prompt_n / prompt_s, 3) if prompt_s > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / predicted_n, 3) if predicted_n else 0.0,
        "predicted_per_second": round(predicted_n / predicted_s, 3) if predicted_s > 0 else 0.0,
    }


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """The identity fields every body and chunk of one response repeats."""

    id: str
    created: int
    model: str
    fingerprint: str
    flavor: str


def completion_body(
    meta: ResponseMeta,
    text: str,
    finish_reason: str,
    usage_obj: dict[str, Any],
    timings_obj: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:  # a tool call answers instead of text (gptgate/sim/tools.py)
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    if reasoning is not None:  # a reasoning model's thinking, beside the answer (DeepSeek)
        message["reasoning_content"] = reasoning
    if meta.flavor == "openai":
        message["refusal"] = None
        message["annotations"] = []
    body: dict[str, Any] = {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage_obj,
        "system_fingerprint": meta.fingerprint,
    }
    if meta.flavor == "openai":
        body["service_tier"] = "default"
    if timings_obj is not None:
        body["timings"] = timings_obj
    return dumps(body).encode()


#: Azure's first stream event: its content filter's verdict on the prompt, with no choices
#: and an empty id and model (as Azure sends it; the answer's come with the next chunk)
AZURE_PROMPT_FILTER = "data: " + dumps({
    "choices": [], "created": 0, "id": "", "model": "", "object": "",
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
        name: {"filtered": False, "severity": "safe"}
        for name in ("hate", "self_harm", "sexual", "violence")
    }}],
}) + "\n\n"


class ChunkWriter:
    """Formats the SSE events of one streamed response."""

    __slots__ = ("_head", "_llama", "_meta", "_tail", "include_usage")

    def __init__(self, meta: ResponseMeta, include_usage: bool) -> None:
        self._meta = meta
        self._llama = meta.flavor == "llamacpp"
        self.include_usage = include_usage
        fp = dumps(meta.fingerprint)
        self._head = (
            f'data: {{"id":{dumps(meta.id)},"object":"chat.completion.chunk",'
            f'"created":{meta.created},"model":{dumps(meta.model)},'
            f'"system_fingerprint":{fp},"choices":[{{"index":0,"delta":'
        )
        # OpenAI sends "usage": null on every chunk once include_usage is on
        self._tail = ',"usage":null}\n\n' if include_usage and not self._llama else "}\n\n"

    def _chunk(self, delta: str, finish: str = "null", extra: str = "") -> str:
        return f'{self._head}{delta},"logprobs":null,"finish_reason":{finish}}}]{extra}{self._tail}'

    @property
    def meta(self) -> ResponseMeta:
        return self._meta

    def delta(self, delta_json: str) -> str:
        """One chunk carrying ``delta_json`` as its delta (a tool call's pieces)."""
        return self._chunk(delta_json)

    def thinking(self, piece: str) -> tuple[str, str]:
        """(the chunks of the part of ``piece`` a reasoning model streams as its thinking,
        the rest): none here; DeepSeek's reasoner overrides it (gptgate/sim/deepseek.py)."""
        return "", piece

    def role(self) -> str:
        if self._llama:
            return self._chunk('{"role":"assistant","content":null}')
        first = self._chunk('{"role":"assistant","content":"","refusal":null}')
        if self._meta.flavor == "azure":  # the content filter's verdict on the prompt first
            return AZURE_PROMPT_FILTER + first
        return first

    def content(self, piece: str) -> str:
        return self._chunk(f'{{"content":{dumps(piece)}}}')

    def finish(self, reason: str, timings_obj: dict[str, Any] | None = None) -> str:
        extra = f',"timings":{dumps(timings_obj)}' if timings_obj is not None else ""
        return self._chunk("{}", dumps(reason), extra)

    def usage_chunk(
        self, usage_obj: dict[str, Any], timings_obj: dict[str, Any] | None = None
    ) -> str:
        m = self._meta
        obj: dict[str, Any] = {
            "id": m.id,
            "object": "chat.completion.chunk",
            "created": m.created,
            "model": m.model,
            "system_fingerprint": m.fingerprint,
            "choices": [],
            "usage": usage_obj,
        }
        if timings_obj is not None:
            obj["timings"] = timings_obj
        return f"data: {dumps(obj)}\n\n"

    def done(self) -> str:
        """The stream's last event."""
        return DONE

    def garbage(self) -> str:
        """One malformed event: a JSON object cut short (what a broken proxy might emit)."""
        return f'data: {{"id":{dumps(self._meta.id)},"choices":[{{"delta":{{"content":"\n\n'
