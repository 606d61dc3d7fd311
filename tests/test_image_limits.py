"""The work of reading an image is bounded (engine/images.py): a JPEG's
scans are counted from its bytes before it is decoded (a progressive JPEG
of thousands of empty scans walks every block of the image once per scan:
a minute for 0.8 MB), and a decode still reading its bytes past its
deadline stops there. The hostile images are built here with Pillow."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from engine import EngineError, decode_image
from engine import images as images_module
from engine.images import MAX_JPEG_SCANS, jpeg_scans


def _jpeg(size=(64, 48), **kw) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (120, 40, 200)).save(out, "JPEG", **kw)
    return out.getvalue()


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


# An AC scan of the first component with no entropy data: libjpeg fills it
# with zeros, walking every block of the component (the cost of the attack).
EMPTY_SCAN = _segment(0xDA, bytes([1, 1, 0x00, 1, 63, 0x00]))


def _with_scans(data: bytes, scans: int) -> bytes:
    """`data` (a progressive JPEG) with `scans` empty scans before its EOI."""
    assert data.endswith(b"\xff\xd9")
    return data[:-2] + EMPTY_SCAN * scans + b"\xff\xd9"


def test_a_jpeg_s_scans_are_counted_from_its_segments():
    baseline, progressive = _jpeg(), _jpeg(progressive=True)
    assert jpeg_scans(baseline) == 1
    assert 2 <= jpeg_scans(progressive) <= 20  # libjpeg's default progression: 10
    assert jpeg_scans(_with_scans(progressive, 7)) == jpeg_scans(progressive) + 7
    # An SOS inside an APP segment (an EXIF thumbnail's) is not the image's:
    # skipped by the segment's length, as the decoder skips it.
    hidden = baseline[:2] + _segment(0xE1, b"Exif\0\0" + b"\xff\xda" * 500) + baseline[2:]
    assert jpeg_scans(hidden) == 1
    assert decode_image(hidden).width == 64
    # Bytes after the EOI are not read by the decoder, nor counted.
    assert jpeg_scans(baseline + EMPTY_SCAN * 500) == 1


def test_a_jpeg_of_too_many_scans_is_refused_before_it_is_decoded():
    progressive = _jpeg((2000, 2000), progressive=True, quality=10)
    assert decode_image(_with_scans(progressive, 50)).width == 2000  # within the limit
    hostile = _with_scans(progressive, 900)  # 20 kB: a second to decode (a minute at 49 MP)
    with pytest.raises(EngineError, match=f"JPEG of {jpeg_scans(hostile)} scans; Tandem reads "
                                          f"JPEGs of at most {MAX_JPEG_SCANS} scans"):
        decode_image(hostile)
    # Thousands of segments (scans, or any other) are not walked one by one.
    for many in (_with_scans(progressive, 3000),
                 progressive[:2] + _segment(0xFE, b"hi") * 5000 + progressive[2:]):
        with pytest.raises(EngineError, match="JPEG of over 1000 segments"):
            decode_image(many)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF"])
def test_a_decode_past_its_deadline_stops(monkeypatch, fmt):
    """A decoder is fed its bytes a block at a time; past DECODE_SECONDS (0
    here: the first block) the next read fails and the image is refused."""
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (1, 2, 3)).save(out, fmt)
    assert decode_image(out.getvalue()).width == 64
    monkeypatch.setattr(images_module, "DECODE_SECONDS", 0.0)
    with pytest.raises(EngineError, match="took over 0 s to decode"):
        decode_image(out.getvalue())
