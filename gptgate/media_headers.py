"""What a media file's first bytes say about its size: an image's pixels, a sound's seconds,
a PDF's pages — read from the header, never decoded.

Why: the prompt estimate (gptgate/media_tokens.py) prices an image by its dimensions, and a
data: URL carries megabytes of base64. Decoding the image (Pillow, not a dependency) would
stall the event loop for nothing; the dimensions are a few bytes into every format the
providers take (PNG, JPEG, GIF, WebP). Every reader returns ``None`` for bytes it does not
recognise: the caller then counts a conservative default, it never raises.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct

__all__ = [
    "HEAD_CHARS",
    "b64_bytes",
    "b64_head",
    "image_size",
    "mp3_seconds",
    "pdf_pages",
    "wav_seconds",
]

#: how much of a base64 payload is decoded to find an image's dimensions: a JPEG's frame
#: header can follow ~64 KB of EXIF and an ICC profile; 256 KB of base64 is 192 KB of file
HEAD_CHARS = 256 * 1024


def b64_head(data: str, chars: int = HEAD_CHARS) -> bytes:
    """The first bytes of base64 ``data`` (``b""`` when it is not base64)."""
    head = "".join(data[: chars + 64].split())  # line-wrapped base64: drop the breaks
    head = head[: len(head) - len(head) % 4] if len(head) > chars else head
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return b""


def b64_bytes(data: str) -> int:
    """The decoded size of base64 ``data`` in bytes, without decoding it."""
    return len(data.rstrip("=")) * 3 // 4


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels of a PNG, JPEG, GIF or WebP from its first bytes."""
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return _positive(width, height)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return _positive(width, height)
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(head)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): not DHT (C4),
#: JPG (C8) or DAC (CC), which share the range
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    """Walk the JPEG's segments to its start-of-frame, which holds height then width."""
    at = 2
    while at + 4 <= len(head):
        if head[at] != 0xFF:
            return None
        marker = head[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # TEM, RSTn: no length
            at += 2
            continue
        (length,) = struct.unpack(">H", head[at + 2 : at + 4])
        if marker in _SOF:
            if at + 9 > len(head):
                return None
            height, width = struct.unpack(">HH", head[at + 5 : at + 9])
            return _positive(width, height)
        if marker == 0xDA or length < 2:  # scan data before any frame: not a JPEG we read
            return None
        at += 2 + length
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return _positive(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        (bits,) = struct.unpack("<I", head[21:25])
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(head) >= 30:
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return _positive(width, height)
    return None


def wav_seconds(head: bytes, size: int) -> float | None:
    """A WAV's duration: its ``data`` bytes (or the file's, for a streamed header) over the
    byte rate of its ``fmt`` chunk."""
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    at, rate, data = 12, 0, 0
    while at + 8 <= len(head):
        chunk, length = head[at : at + 4], struct.unpack("<I", head[at + 4 : at + 8])[0]
        if chunk == b"fmt " and at + 20 <= len(head):
            (rate,) = struct.unpack("<I", head[at + 16 : at + 20])
        elif chunk == b"data":
            data = length if 0 < length < 0xFFFFFFFF else size - at - 8
            break
        at += 8 + length + (length & 1)
    return data / rate if rate > 0 and data > 0 else None


#: kbit/s by bitrate index, MPEG-1 Layer III and MPEG-2/2.5 Layer III
_MP3_KBPS = {
    3: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}


def mp3_seconds(head: bytes, size: int) -> float | None:
    """An MP3's duration: its size over the bitrate of its first frame (after an ID3 tag).
    A variable-bitrate file's first frame may say less or more than its mean: an estimate."""
    at = 0
    if head[:3] == b"ID3" and len(head) >= 10:
        at = 10 + ((head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9])
    if at + 4 > len(head) or head[at] != 0xFF or head[at + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (head[at + 1] >> 3) & 3, (head[at + 1] >> 1) & 3
    if layer != 1 or version == 1:  # Layer III only; version 1 is reserved
        return None
    index = head[at + 2] >> 4
    kbps = _MP3_KBPS[3 if version == 3 else 2][index] if index < 15 else 0
    return (size - at) * 8 / (kbps * 1000) if kbps else None


#: a ``/Pages`` node's ``/Count``, either side of its ``/Type`` (within one dictionary)
_PAGE_COUNT = re.compile(
    rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b"
)


def pdf_pages(pdf: bytes) -> int | None:
    """A PDF's pages: the largest ``/Count`` of a ``/Pages`` node (the root's counts all of
    them). ``None`` when the page tree sits in a compressed object stream, or this is no PDF."""
    if not pdf.startswith(b"%PDF-"):
        return None
    counts = [int(a or b) for a, b in _PAGE_COUNT.findall(pdf)]
    return max(counts) if counts and max(counts) > 0 else None
