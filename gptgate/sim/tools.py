"""Tool calls on the simulator's OpenAI-shaped flavors (openai, azure, deepseek, llamacpp).

A request carrying ``tools`` is answered with one deterministic call — the tool
``tool_choice`` names, else the first — unless ``tool_choice`` is ``"none"`` or the last
message is a tool's result (then the model answers in text, as a real one would after using
its tool). The arguments are a sample value per required parameter, so a test can assert
them; the answer is as long as its arguments, not a drawn text length. Bodies carry
``message.tool_calls`` with ``finish_reason: "tool_calls"``; a stream sends the call's id
and name first, then the arguments, in OpenAI's ``delta.tool_calls`` shape (what a client
must accumulate by ``index``). The Messages API's ``tool_use`` blocks live in
gptgate/sim/anthropic_wire.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gptgate.sim.job import Job
from gptgate.sim.request import BadRequest
from gptgate.sim.wire import ChunkWriter, dumps
from gptgate.tokens import estimate_text_tokens

__all__ = [
    "ToolCall",
    "ToolCallWriter",
    "pick_tool_call",
    "sample_arguments",
    "size_tool_job",
    "tool_answer",
    "with_tool_call",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The call the simulated model makes: which function, with what arguments."""

    name: str
    arguments: str  # a JSON object, as OpenAI sends it

    def tokens(self) -> int:
        """Output tokens the call costs: its name and arguments plus a little framing."""
        return 8 + estimate_text_tokens(self.name + self.arguments)

    def message_calls(self, call_id: str) -> list[dict[str, Any]]:
        """``message.tool_calls`` of a non-streamed answer."""
        function = {"name": self.name, "arguments": self.arguments}
        return [{"id": call_id, "type": "function", "function": function}]


def _sample(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    return {"string": "sim", "integer": 1, "number": 1.5, "boolean": True}.get(str(kind))


def sample_arguments(schema: Any) -> dict[str, Any]:
    """A plausible argument object for a JSON schema: a sample value per required
    property (every property when none is marked required)."""
    if not isinstance(schema, Mapping):
        return {}
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    names = required if isinstance(required, list) else list(props)
    return {str(n): _sample(props.get(n)) for n in names}


def _functions(tools: Any) -> list[Mapping[str, Any]]:
    if not isinstance(tools, list):
        raise BadRequest("Invalid 'tools': expected an array.", param="tools",
                         code="invalid_type")
    out: list[Mapping[str, Any]] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"Missing required parameter: 'tools[{i}].function.name'.",
                param=f"tools[{i}].function.name", code="missing_required_parameter",
            )
        out.append(fn)
    return out


def pick_tool_call(data: Mapping[str, Any]) -> ToolCall | None:
    """The call a chat-completions body asks for, or None (no tools, ``tool_choice: "none"``,
    or a tool's result to answer). A malformed ``tools`` or a ``tool_choice`` naming no
    given tool is a 400, as on OpenAI."""
    if data.get("tools") is None:
        return None
    functions = _functions(data["tools"])
    choice = data.get("tool_choice", "auto")
    messages = data.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not functions or choice == "none":
        return None
    if isinstance(last, Mapping) and last.get("role") == "tool":
        return None
    chosen = functions[0]
    if isinstance(choice, Mapping):
        named = choice.get("function")
        name = named.get("name") if isinstance(named, Mapping) else None
        found = [fn for fn in functions if fn.get("name") == name]
        if not found:
            raise BadRequest(
                f"Invalid value for 'tool_choice': tool {name!r} is not in 'tools'.",
                param="tool_choice", code="invalid_value",
            )
        chosen = found[0]
    args = sample_arguments(chosen.get("parameters"))
    return ToolCall(str(chosen["name"]), json.dumps(args, separators=(",", ":")))


def call_id(response_id: str) -> str:
    """The call's id, derived from the response's so replays are byte-identical."""
    return "call_" + response_id.removeprefix("chatcmpl-")


class ToolCallWriter(ChunkWriter):
    """Wraps a flavor's :class:`ChunkWriter` so its content becomes ``delta.tool_calls``:
    the first content write sends the call's id and name, then its arguments; later writes
    send nothing. The finish says ``tool_calls``; role, usage and the end stay the flavor's
    (DeepSeek's usage on the finish chunk keeps working)."""

    __slots__ = ("_call", "_inner", "_sent")

    def __init__(self, inner: ChunkWriter, call: ToolCall) -> None:  # no super(): inner holds it
        self._inner = inner
        self._call = call
        self._sent = False
        self.include_usage = inner.include_usage

    def role(self) -> str:
        return self._inner.role()

    def content(self, piece: str) -> str:
        if self._sent:
            return ""
        thought, piece = self._inner.thinking(piece)  # a reasoner thinks before it calls
        if not piece:
            return thought
        self._sent = True
        cid = call_id(self._inner.meta.id)
        head = {"index": 0, "id": cid, "type": "function",
                "function": {"name": self._call.name, "arguments": ""}}
        args = {"index": 0, "function": {"arguments": self._call.arguments}}
        return thought + self._inner.delta(dumps({"tool_calls": [head]})) + self._inner.delta(
            dumps({"tool_calls": [args]})
        )

    def finish(self, reason: str, timings_obj: dict[str, Any] | None = None) -> str:
        return self._inner.finish("tool_calls" if reason == "stop" else reason, timings_obj)

    def usage_chunk(
        self, usage_obj: dict[str, Any], timings_obj: dict[str, Any] | None = None
    ) -> str:
        return self._inner.usage_chunk(usage_obj, timings_obj)

    def done(self) -> str:
        return self._inner.done()

    def garbage(self) -> str:
        return self._inner.garbage()


def size_tool_job(job: Job, call: ToolCall, max_tokens: int | None) -> None:
    """The answer is the call: as long as its arguments (cut at ``max_tokens``)."""
    needed = call.tokens()
    cap = max_tokens or needed
    job.tokens = min(needed, cap)
    job.finish_reason = "stop" if needed <= cap else "length"
    job.dialect = call


def tool_answer(job: Job, response_id: str) -> tuple[str, list[dict[str, Any]] | None]:
    """(finish reason, ``message.tool_calls``) of a non-streamed answer."""
    call = job.dialect
    if not isinstance(call, ToolCall):
        return job.finish_reason, None
    finish = "tool_calls" if job.finish_reason == "stop" else job.finish_reason
    return finish, call.message_calls(call_id(response_id))


def with_tool_call(writer: ChunkWriter, job: Job) -> ChunkWriter:
    """``writer``, streaming the job's tool call when it has one."""
    call = job.dialect
    return ToolCallWriter(writer, call) if isinstance(call, ToolCall) else writer
