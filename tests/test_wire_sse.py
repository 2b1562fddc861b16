"""The SSE decoder: WHATWG EventSource parsing over bytes split at arbitrary offsets."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gptgate.wire import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def bytewise(blob: bytes) -> list[SSEEvent]:
    return decode(*(blob[i : i + 1] for i in range(len(blob))))


# --------------------------------------------------------------------------------------------
# Property: any split of any stream gives the events of the whole stream


@dataclass
class Generated:
    event: str | None
    lines: list[str]
    id: str | None
    retry: int | None


_line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
_generated = st.builds(
    Generated,
    event=st.none() | st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1),
    lines=st.lists(_line_text, min_size=1, max_size=4),
    id=st.none() | st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=6),
    retry=st.none() | st.integers(0, 10**6),
)


def serialize(events: list[Generated], data: st.DataObject) -> tuple[bytes, list[SSEEvent]]:
    """The wire form of ``events`` (with random comments, ``data:`` spacing, line endings and
    a BOM) and the events EventSource must see."""
    draw = data.draw
    lines: list[str] = []
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for event in events:
        if draw(st.booleans()):
            lines.append(": " + draw(_line_text))
        if draw(st.booleans()):  # a keep-alive block: comment + blank line, dispatches nothing
            lines += [": keep-alive", ""]
        if event.event is not None:
            lines.append("event: " + event.event)
        if event.id is not None:
            lines.append("id: " + event.id)
            last_id = event.id
        if event.retry is not None:
            lines.append(f"retry: {event.retry}")
        for text in event.lines:
            spaced = text.startswith(" ") or draw(st.booleans())
            lines.append(("data: " if spaced else "data:") + text)
            if draw(st.booleans()):
                lines.append(":" + draw(_line_text))
        lines.append("")
        expected.append(SSEEvent(event.event, "\n".join(event.lines), last_id, event.retry))
    out: list[str] = []
    previous = ""
    for line in lines:
        ending = draw(st.sampled_from(["\n", "\r\n", "\r"]))
        if previous == "\r" and line == "" and ending == "\n":
            ending = "\r\n"  # "\r" + "\n" would read as one CRLF and swallow the blank line
        out.append(line + ending)
        previous = ending
    bom = "\ufeff" if draw(st.booleans()) else ""
    return (bom + "".join(out)).encode(), expected


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_generated, max_size=6), data=st.data())
def test_any_split_yields_the_same_events(events: list[Generated], data: st.DataObject) -> None:
    blob, expected = serialize(events, data)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(blob)), max_size=12))))
    chunks = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)]
    whole = decode(blob)
    assert whole == expected
    assert decode(*chunks) == whole


@settings(max_examples=50, deadline=None)
@given(events=st.lists(_generated, min_size=1, max_size=3), data=st.data())
def test_byte_by_byte_yields_the_same_events(events: list[Generated], data: st.DataObject) -> None:
    blob, expected = serialize(events, data)
    assert bytewise(blob) == expected


# --------------------------------------------------------------------------------------------
# The quirks, one by one


def test_comment_lines_are_ignored() -> None:
    assert decode(b": keep-alive\n\ndata: x\n: in between\n\n") == [SSEEvent(None, "x")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode(b"data: a\ndata: b\ndata:\ndata: c\n\n") == [SSEEvent(None, "a\nb\n\nc")]


def test_data_with_and_without_a_space() -> None:
    events = decode(b"data:x\n\ndata: x\n\ndata:  x\n\n")
    assert [e.data for e in events] == ["x", "x", " x"]  # only one space is removed


def test_data_field_without_colon_is_empty_data() -> None:
    assert decode(b"data\n\n") == [SSEEvent(None, "")]


def test_line_endings_crlf_cr_lf_and_mixed() -> None:
    for blob in (
        b"data: a\r\n\r\ndata: b\r\n\r\n",
        b"data: a\r\rdata: b\r\r",
        b"data: a\n\ndata: b\n\n",
        b"data: a\r\n\rdata: b\n\r\n",
    ):
        assert [e.data for e in decode(blob)] == ["a", "b"], blob


def test_crlf_split_across_two_reads() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r\n\r", b"\n") == [SSEEvent(None, "a\nb")]
    assert decode(b"data: a\r", b"\n", b"\r", b"\n") == [SSEEvent(None, "a")]


def test_empty_reads_change_nothing() -> None:
    assert decode(b"", b"data: a\r", b"", b"\n\n", b"") == [SSEEvent(None, "a")]


def test_multi_byte_character_split_across_reads() -> None:
    blob = "data: héllo 世界 🎉\n\n".encode()
    for cut in range(len(blob) + 1):
        assert decode(blob[:cut], blob[cut:]) == [SSEEvent(None, "héllo 世界 🎉")]


def test_invalid_utf8_becomes_replacement_character() -> None:
    events = decode(b"data: a\xff\xfeb\xe2\x82\n\n")
    assert events == [SSEEvent(None, "a\ufffd\ufffdb\ufffd")]


def test_event_id_and_retry_fields() -> None:
    events = decode(b"event: delta\nid: 7\nretry: 1500\ndata: x\n\ndata: y\n\n")
    assert events == [SSEEvent("delta", "x", "7", 1500), SSEEvent(None, "y", "7", None)]


def test_id_with_nul_and_non_numeric_retry_are_ignored() -> None:
    events = decode(b"id: 1\n\nid: a\x00b\nretry: 1.5\nretry: soon\ndata: x\n\n")
    assert events == [SSEEvent(None, "x", "1", None)]


def test_unknown_fields_are_ignored() -> None:
    assert decode(b"foo: bar\nbaz\ndata: x\nEvent: nope\n\n") == [SSEEvent(None, "x")]


def test_event_without_data_is_not_dispatched_and_does_not_leak() -> None:
    assert decode(b"event: ping\n\ndata: x\n\n") == [SSEEvent(None, "x")]


def test_empty_event_name_is_none() -> None:
    assert decode(b"event:\ndata: x\n\n") == [SSEEvent(None, "x")]


def test_bom_at_start_is_stripped_even_when_split() -> None:
    blob = b"\xef\xbb\xbfdata: x\n\n"
    assert decode(blob) == [SSEEvent(None, "x")]
    assert bytewise(blob) == [SSEEvent(None, "x")]


def test_bom_later_in_the_stream_is_data() -> None:
    assert decode(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [SSEEvent(None, "x")]


def test_many_events_in_one_read() -> None:
    blob = b"".join(b'data: {"n":%d}\n\n' % i for i in range(50))
    assert [e.data for e in decode(blob)] == [f'{{"n":{i}}}' for i in range(50)]


def test_feed_returns_events_as_soon_as_they_complete() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\nda") == [SSEEvent(None, "a")]
    assert decoder.feed(b"ta: b\n\n") == [SSEEvent(None, "b")]
    assert decoder.close() == []
    assert decoder.truncated is False


# --------------------------------------------------------------------------------------------
# End of stream


def test_last_event_without_blank_line_is_dispatched_at_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n') == []
    assert decoder.close() == [SSEEvent(None, '{"a":1}')]
    assert decoder.truncated is False


def test_unterminated_json_data_line_is_dispatched_at_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b":2}') == [SSEEvent(None, '{"a":1}')]
    assert decoder.close() == [SSEEvent(None, '{"b":2}')]
    assert decoder.truncated is False


def test_unterminated_done_marker_is_dispatched_at_close() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: [DONE]")
    assert decoder.close() == [SSEEvent(None, "[DONE]")]
    assert decoder.truncated is False


def test_cut_data_line_is_dropped_and_marks_truncation() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b":') == [SSEEvent(None, '{"a":1}')]
    assert decoder.close() == []
    assert decoder.truncated is True


def test_cut_non_data_line_marks_truncation() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n\nevent: err")
    assert decoder.close() == []
    assert decoder.truncated is True


def test_close_twice_is_harmless() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n")
    assert decoder.close() == [SSEEvent(None, "x")]
    assert decoder.close() == []
