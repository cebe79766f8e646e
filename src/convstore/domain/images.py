"""What an image's bytes say about themselves: format and pixel dimensions.

Only headers are read; nothing is decoded, so checking an image costs microseconds and no
imaging library is needed.
"""

from __future__ import annotations

import struct
from typing import Literal, TypeAlias

ImageMediaType: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]

IMAGE_MEDIA_TYPES: tuple[ImageMediaType, ...] = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
)

# JPEG start-of-frame markers (baseline, progressive, …); C4, C8 and CC are not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def sniff_media_type(data: bytes) -> ImageMediaType | None:
    """The image format the bytes' signature says, or ``None`` for none we accept."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def dimensions(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels from the header, or ``None`` if it cannot be read."""
    try:
        match sniff_media_type(data):
            case "image/png":
                width, height = struct.unpack(">II", data[16:24])
            case "image/gif":
                width, height = struct.unpack("<HH", data[6:10])
            case "image/jpeg":
                return _jpeg_dimensions(data)
            case "image/webp":
                return _webp_dimensions(data)
            case None:
                return None
    except struct.error:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _jpeg_dimensions(data: bytes) -> tuple[int, int] | None:
    position = 2
    while position + 9 < len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return (width, height) if width > 0 and height > 0 else None
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        position += 2 + length
    return None


def _webp_dimensions(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8L" and len(data) >= 25:
        b0, b1, b2, b3 = data[21:25]
        width = 1 + (b0 | (b1 & 0x3F) << 8)
        height = 1 + (b1 >> 6 | b2 << 2 | (b3 & 0x0F) << 10)
        return width, height
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        width, height = width & 0x3FFF, height & 0x3FFF
        return (width, height) if width > 0 and height > 0 else None
    return None
