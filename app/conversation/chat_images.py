"""Images attached to a message (issue 37): read, checked and made into a
thumbnail off the GUI thread; kept with the chat by their digest.

Qt-free. An image is checked as the API's are (engine/images.py: PNG, JPEG,
WebP or GIF by its bytes, 20 MiB, 50 megapixels, 200:1, at most 24 megapixels
decoded (a larger JPEG read at 1/2, 1/4 or 1/8, other formats refused), at most
100 JPEG scans, damaged files refused). What
is kept is the file's own bytes (the store's `images` table, schema 5) and a
small PNG thumbnail; a message keeps a record per image ({digest, name,
width, height, format, size}), in order. A chat with images is sent with
them again each turn: `with_images` turns the records of a prompt's messages
into the engine's image parts, reading the bytes through the function given.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.images import MAX_IMAGE_BYTES, ChatImage, decode_image

THUMB_SIDE = 240  # a thumbnail's longest side, in pixels
SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")
MAX_MESSAGE_IMAGES = 16  # one message (the API's limit for a request)


@dataclass
class ImageFile:
    """An image read for a message: its bytes, what it is, its thumbnail."""

    name: str
    data: bytes
    width: int = 0
    height: int = 0
    format: str = ""
    digest: str = ""
    thumb: bytes = b""  # PNG, at most THUMB_SIDE pixels a side
    error: str | None = None  # why it cannot be attached
    kept_size: int = 0  # an image put back from a stored message (its bytes not read)

    @property
    def size(self) -> int:
        return len(self.data) or self.kept_size

    def record(self) -> dict:
        """What the message keeps of it (its bytes are kept once, by digest)."""
        return {"digest": self.digest, "name": self.name[:255], "width": self.width,
                "height": self.height, "format": self.format, "size": self.size}


def is_image(path: str | Path) -> bool:
    """Whether the file's first bytes are an image's (PNG, JPEG, GIF, WebP):
    attached as an image, not read as text."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head.startswith(SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def read_image_file(path: str | Path) -> ImageFile:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            return ImageFile(path.name, b"", error=f"It is {size / 2**20:.1f} MiB; images up "
                                                   f"to {MAX_IMAGE_BYTES >> 20} MiB can be "
                                                   "attached.")
        data = path.read_bytes()
    except OSError as e:
        return ImageFile(path.name, b"", error=f"It could not be read ({e.strerror}).")
    return read_image_bytes(path.name, data)


def read_image_bytes(name: str, data: bytes) -> ImageFile:
    """`data` checked as an image (engine/images.py) with its thumbnail, or
    an ImageFile whose `error` says why not."""
    from engine import EngineError

    try:
        image = decode_image(data, "It")
    except EngineError as e:
        return ImageFile(name, b"", error=str(e))
    return ImageFile(name, data, image.width, image.height, image.format, image.digest,
                     thumbnail(image))


def thumbnail(image: ChatImage) -> bytes:
    small = image.pixels.copy()
    small.thumbnail((THUMB_SIDE, THUMB_SIDE))
    out = io.BytesIO()
    small.save(out, "PNG", optimize=False)
    return out.getvalue()


def image_record(raw) -> dict | None:
    """`raw` as an image record, or None when it is not one (a damaged or
    hand-made stats cell)."""
    if not isinstance(raw, dict):
        return None
    digest = raw.get("digest")
    if not isinstance(digest, str) or len(digest) != 32 or \
            any(c not in "0123456789abcdef" for c in digest):
        return None
    numbers = [raw.get(k) for k in ("width", "height", "size")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40
               for n in numbers):
        return None
    return {"digest": digest, "name": str(raw.get("name") or "image")[:255],
            "width": numbers[0], "height": numbers[1],
            "format": str(raw.get("format") or "")[:8], "size": numbers[2]}


def records_of(message: dict) -> list[dict]:
    """A message's image records, the unreadable ones left out."""
    raw = message.get("images")
    return [r for r in (image_record(x) for x in raw) if r] if isinstance(raw, list) else []


def describe(record: dict) -> str:
    """'screenshot.png · 1280×800 · 212 KiB'."""
    size = record.get("size") or 0
    shown = f"{size / 1024:.0f} KiB" if size < 1 << 20 else f"{size / 2**20:.1f} MiB"
    return f"{record.get('name') or 'image'} · {record['width']}×{record['height']} · {shown}"


def with_images(messages: list[dict], data_of: Callable[[str], bytes | None]) -> list[dict]:
    """Prompt messages with each user message's image records made into the
    engine's image parts ({"images": [ChatImage], "parts": [...]}: the
    images first, then the words). `data_of(digest)` gives an image's bytes
    (None: it is gone from the store, said by a ValueError). Run off the GUI
    thread: decoding takes a while."""
    out = []
    for m in messages:
        records = m.get("images") or []
        if not records:
            out.append({k: v for k, v in m.items() if k != "images"})
            continue
        images = []
        for record in records:
            data = data_of(record["digest"])
            if data is None:
                raise ValueError(f"The image {record.get('name') or ''} is no longer in the "
                                 "chat's database.")
            images.append(decode_image(data, f"The image {record.get('name') or ''}"))
        parts = [{"type": "image", "index": i} for i in range(len(images))]
        if m["content"]:
            parts.append({"type": "text", "text": m["content"]})
        out.append({k: v for k, v in m.items() if k != "images"}
                   | {"images": images, "parts": parts})
    return out


def without_images(messages: list[dict]) -> list[dict]:
    """Prompt messages for a model that reads no images: each image named in
    its message's text instead (a chat with images goes on with a text model)."""
    out = []
    for m in messages:
        records = m.get("images")
        if not records:
            out.append(m)
            continue
        named = " ".join(f"[image: {r.get('name') or 'image'}]" for r in records)
        out.append({k: v for k, v in m.items() if k != "images"}
                   | {"content": f"{named}\n\n{m['content']}" if m["content"] else named})
    return out
