"""A fake llama-server's slots, in virtual time: each slot caches only the prompt it last ran.

llama.cpp's server (the build in /work/shared/realserver) picks for a request the idle slot
whose last prompt shares the longest prefix with it, when that share exceeds 10 %
(``--slot-prompt-similarity``), else the least recently used idle one; it reuses only that
slot's cached tokens and reports them as ``usage.prompt_tokens_details.cached_tokens``. Two
calls of one prefix at once run on two slots and the second prefills the prefix again — what
the simulator's shared per-replica prefix cache does not show. A slot given a new prompt first
saves its old one, when the two are not alike (another conversation, not the next turn of the
same), to a host-memory cache (``--cache-ram``, on by default), from which a slot later loads a
prompt that matches a request better than its own. Tokens here are 4-character
pieces of the rendered messages; times are a prefill cost per uncached token and a decode
cost per answer token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import anyio
import httpx2

from gptgate.sim.virtual import LoopClock

SIMILARITY = 0.1


@dataclass
class Slot:
    tokens: list[str] = field(default_factory=list)
    busy: bool = False
    last_used: float = -1.0


def _tokens(messages: list[dict[str, str]]) -> list[str]:
    text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
    return [text[i:i + 4] for i in range(0, len(text), 4)]


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class FakeLlamaSlots:
    clock: LoopClock
    slots: int = 4
    prefill_s: float = 0.004
    decode_s: float = 0.03
    pool: list[Slot] = field(default_factory=list)
    #: prompts saved from slots that took another prompt (most recent last)
    ram: list[list[str]] = field(default_factory=list)
    ram_entries: int = 32
    cached: int = 0
    prompt: int = 0
    #: prompts the server prefills at once: None, every slot (compute to spare, as a GPU with
    #: room); 1, one after the other — the slots share the compute (this build on a CPU,
    #: ``-t 1``: four cold prefills at once take four times as long as one)
    prefill_lanes: int | None = None
    #: GET ``/slots`` answers as llama-server's (on by default there); False: as with
    #: ``--no-slots``, and every other GET (``/metrics`` without ``--metrics``, ``/props``) is
    #: a 404 — a server whose load ``Backend(signals=None)`` cannot read
    serves_slots: bool = False
    #: GET requests seen (the signals reader's)
    reads: int = 0
    #: as ``--api-key``: a GET without this bearer token is a 401 (llama-server guards
    #: ``/slots``, ``/props`` and ``/metrics`` as it does ``/v1``)
    api_key: str | None = None

    def __post_init__(self) -> None:
        self.pool = [Slot() for _ in range(self.slots)]
        self._freed = anyio.Event()
        self._lanes = (anyio.CapacityLimiter(self.prefill_lanes)
                       if self.prefill_lanes is not None else None)

    async def _prefill(self, tokens: int) -> None:
        if self._lanes is None or tokens <= 0:
            await self.clock.sleep(tokens * self.prefill_s)
            return
        async with self._lanes:
            await self.clock.sleep(tokens * self.prefill_s)

    def _pick(self, tokens: list[str]) -> Slot | None:
        idle = [s for s in self.pool if not s.busy]
        if not idle:
            return None
        best = max(idle, key=lambda s: _common(s.tokens, tokens))
        if _common(best.tokens, tokens) > SIMILARITY * len(tokens):
            return best
        return min(idle, key=lambda s: s.last_used)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            if self.api_key is not None and (
                request.headers.get("authorization") != f"Bearer {self.api_key}"
            ):
                self.reads += 1
                return httpx2.Response(401, json={"error": {"code": 401,
                                                            "message": "Invalid API Key"}})
            return self._read(request.url.path)
        body = json.loads(request.content)
        tokens = _tokens(body["messages"])
        while (slot := self._pick(tokens)) is None:
            await self._freed.wait()
        slot.busy = True
        hit = _common(slot.tokens, tokens)
        saved = max(self.ram, key=lambda p: _common(p, tokens), default=[])
        if _common(saved, tokens) > hit:  # a better prompt in host memory: loaded
            hit = _common(saved, tokens)
        own = _common(slot.tokens, tokens)
        if slot.tokens and own <= SIMILARITY * len(slot.tokens):  # another conversation
            self.ram = [p for p in self.ram if p != slot.tokens][-(self.ram_entries - 1):]
            self.ram.append(slot.tokens)
        out = int(body.get("max_tokens") or 16)
        try:
            await self._prefill(len(tokens) - hit)
            await self.clock.sleep(out * self.decode_s)
        finally:
            slot.tokens, slot.busy, slot.last_used = tokens, False, self.clock.now()
            self._freed.set()
            self._freed = anyio.Event()
        self.cached += hit
        self.prompt += len(tokens)
        usage = {"prompt_tokens": len(tokens), "completion_tokens": out,
                 "total_tokens": len(tokens) + out, "prompt_tokens_details": {"cached_tokens": hit}}
        if body.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": "x " * out},
                              "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
                {"choices": [], "usage": usage},
            ]
            sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx2.Response(200, content=sse.encode(),
                                   headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json={
            "id": "c", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "x " * out}}],
            "usage": usage,
        })

    def _read(self, path: str) -> httpx2.Response:
        self.reads += 1
        if path == "/slots" and self.serves_slots:
            return httpx2.Response(200, json=[
                {"id": n, "n_ctx": 4096, "is_processing": slot.busy}
                for n, slot in enumerate(self.pool)
            ])
        return httpx2.Response(404, json={"error": {"code": 404, "message": "File Not Found",
                                                    "type": "not_found_error"}})

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)
