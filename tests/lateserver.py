"""A server that keeps running a request its client hung up on: for a while (one that polls
for disconnects), or to the end of its answer (llama-server with a non-streamed answer)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import httpx2

import gptgate as gg
from tests.mockbackend import completion


class LateNoticingServer:
    """Counts a request as running until it answers or, when its client hung up,
    ``notice_s`` later (a server that polls for disconnects) — or, with ``notice_s=None``,
    until its answer would have ended (llama-server with a non-streamed answer). The first
    answer takes ``first_s``, the others ``answer_s``."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        *,
        notice_s: float | None,
        answer_s: float = 0.5,
        first_s: float = 100.0,
        text: str = "hi there",
    ) -> None:
        self.task_group = task_group
        self.notice_s = notice_s
        self.answer_s = answer_s
        self.first_s = first_s
        self.text = text  # the answer (its usage: len(text) // 4 output tokens)
        self.requests = 0
        self.running = 0
        self.peak = 0
        self.sent_at: list[float] = []

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        self.sent_at.append(anyio.current_time())
        takes = self.first_s if self.requests == 1 else self.answer_s
        end = anyio.current_time() + takes
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await anyio.sleep(takes)
        except anyio.get_cancelled_exc_class():
            notice = end - anyio.current_time() if self.notice_s is None else self.notice_s
            self.task_group.start_soon(self._notice, notice)
            raise
        self.running -= 1
        return httpx2.Response(200, json=completion(self.text))

    async def _notice(self, after_s: float) -> None:
        await anyio.sleep(after_s)
        self.running -= 1


def late_backend(server: LateNoticingServer, **options: Any) -> gg.Backend:
    options = {"concurrency": 1, "timeout": 1.0, **options}
    return gg.Backend(
        name="mock", base_url="http://127.0.0.1:9/v1", model="m",
        transport=httpx2.MockTransport(server), **options,
    )


def finishing(
    task_group: anyio.abc.TaskGroup,
    answers: str,
    *,
    answer_s: float = 3.0,
    text: str = "hi there",
    **options: Any,
) -> tuple[LateNoticingServer, gg.Backend]:
    """A server that generates an answer to its end when hung up on (its first answer takes
    3 s, the others ``answer_s``), and a backend over it: limit 1, ``timeout`` 10 s,
    ``abandoned_answers=answers`` (and ``options``)."""
    server = LateNoticingServer(
        task_group, notice_s=None, first_s=3.0, answer_s=answer_s, text=text
    )
    return server, late_backend(server, timeout=10.0, abandoned_answers=answers, **options)


def long_answer(
    task_group: anyio.abc.TaskGroup, answers: str
) -> tuple[LateNoticingServer, gg.Backend]:
    """:func:`finishing`, its first answer 2,000 tokens long (10 + 2,000 billed), on a priced
    backend (input $1, output $10 per million tokens)."""
    return finishing(
        task_group, answers, text="word " * 1600,
        price=gg.Price(input_per_mtok=1.0, output_per_mtok=10.0),
    )
