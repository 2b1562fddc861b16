"""A line of ``job_dir/live.jsonl`` cut short by a crash (power lost, a full disk mid-write)
is skipped when the job is taken up — and so was the next answer kept after it: it was
appended to the cut line, and the two read as one line that is no JSON. That answer, paid for
at the live price, was then sent and paid for again."""

from __future__ import annotations

from pathlib import Path

import gptgate as gg
from gptgate.batch_store import JobStore


def _answer(text: str) -> gg.ChatResult:
    usage = gg.Usage(input_tokens=3, output_tokens=2)
    return gg.ChatResult(
        text=text, finish_reason="stop", backend="oa", hardware="cloud", model="m",
        streamed=False, attempts=1, usage=usage, billed_usage=usage, ttft_s=None,
        latency_s=0.1, queue_s=0.0, cost_usd=0.001, scenario="default", stream_decision="x",
    )


def test_an_answer_kept_after_a_cut_line_is_read_back(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.append_live(0, _answer("first"))
    with open(tmp_path / "live.jsonl", "a", encoding="utf-8") as out:
        out.write('{"index": 1, "result": {"text": "cut sh')  # the crash
    store.append_live(2, _answer("after the crash"))
    kept = store.load_live()
    assert sorted(kept) == [0, 2]
    assert kept[2].text == "after the crash"
