"""Images in chats (issue 37): bytes from outside (an API's data: URL, a
file the user attached) decoded and checked before any model sees them.

An image is refused, saying why, when it is not a PNG, JPEG, WebP or GIF
(its bytes are read, never its declared type), is damaged or truncated,
has more than `MAX_PIXELS` pixels or is more than `MAX_ASPECT` times as
wide as tall or tall as wide (read from its header, before anything is
decoded: a decompression bomb never decodes), or its encoded bytes pass
`MAX_IMAGE_BYTES`. What is decoded is at most `MAX_DECODED_PIXELS`: a
larger JPEG is decoded at 1/2, 1/4 or 1/8 of its size (libjpeg scales as it
decodes), any other format refused (a WebP decodes whole at ~16 bytes a
pixel). A decode's work is bounded too: a JPEG with more than
`MAX_JPEG_SCANS` scans is refused from its bytes (each scan of a progressive
JPEG walks every block of the image: a 0.8 MB file of thousands of empty
scans took a minute), and a decode still reading its bytes after
`DECODE_SECONDS` stops there (`_Deadline`, between reads of at most
`DECODE_BLOCK` bytes). A request holds at most `MAX_IMAGES` images and
`MAX_REQUEST_PIXELS` pixels in all (`ImageBudget`, counted before
decoding). A GIF gives its first frame; a photo's
EXIF orientation is applied; everything becomes RGB. Resizing to what a
model takes is the model's processor's work.

`ChatImage.digest` names the decoded pixels (BLAKE2b over size and RGB bytes):
the same image twice is the same key, a different image of the same size
is not. No MLX here: the server checks images on its worker threads and
the app on its own."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import time
import warnings
from dataclasses import dataclass, field

from .core.errors import EngineError
from .models.vision_kinds import MAX_ASPECT

MAX_IMAGE_BYTES = 20 << 20  # one image, encoded
MAX_PIXELS = 50_000_000  # one image: a 48-megapixel phone photo passes
MAX_DECODED_PIXELS = 24_000_000  # one image as decoded (a model reads ~1 MP of it)
MAX_IMAGES = 16  # one request
MAX_REQUEST_PIXELS = 100_000_000  # one request, decoded (3 bytes a pixel)
MAX_JPEG_SCANS = 100  # a progressive JPEG has about 10
DECODE_SECONDS = 30.0  # one image, read and decoded (a worker thread waits on it)
DECODE_BLOCK = 16 << 10  # bytes given the decoder at a time: the deadline is checked between
FORMATS = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp", "GIF": "gif"}
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)"
                       r"(?P<b64>;base64)?,", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class ChatImage:
    """A decoded, checked image (RGB)."""

    pixels: object = field(repr=False)  # a PIL.Image.Image in RGB mode
    width: int
    height: int
    format: str  # png, jpeg, webp, gif
    digest: str  # BLAKE2b of the size and the RGB bytes

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6


def _bad(why: str) -> EngineError:
    return EngineError(why, "bad-argument")


def decode_image(data: bytes, what: str = "The image",
                 budget: ImageBudget | None = None) -> ChatImage:
    """`data` (a file's bytes) as a checked ChatImage (counted against the
    request's `budget` before it is decoded); EngineError says why not."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    if len(data) > MAX_IMAGE_BYTES:
        raise _bad(f"{what} is {len(data) / 2**20:.1f} MiB; an image is at most "
                   f"{MAX_IMAGE_BYTES >> 20} MiB.")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PILImage.DecompressionBombWarning)
        try:
            source = _Deadline(data)
            image = PILImage.open(source)  # reads the header only
        except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
            raise _bad(f"{what} has more than {MAX_PIXELS / 1e6:.0f} megapixels.") from None
        except (OSError, ValueError, SyntaxError):
            raise _bad(f"{what} is not an image Tandem reads (PNG, JPEG, WebP or GIF).") \
                from None
        kind = FORMATS.get(image.format or "")
        if kind is None:
            raise _bad(f"{what} is a {image.format or 'file of an unknown kind'}; Tandem reads "
                       "PNG, JPEG, WebP and GIF images.")
        width, height = image.size
        if width < 1 or height < 1:
            raise _bad(f"{what} has no pixels.")
        if width * height > MAX_PIXELS:
            raise _bad(f"{what} is {width}x{height} ({width * height / 1e6:.0f} megapixels); "
                       f"an image is at most {MAX_PIXELS / 1e6:.0f} megapixels.")
        if kind == "jpeg" and (scans := jpeg_scans(data)) > MAX_JPEG_SCANS:
            many = (f"{scans} scans" if scans <= MAX_JPEG_MARKERS else
                    f"over {MAX_JPEG_MARKERS} segments")
            raise _bad(f"{what} is a JPEG of {many}; Tandem reads JPEGs of at most "
                       f"{MAX_JPEG_SCANS} scans (a progressive JPEG has about 10).")
        if max(width, height) > MAX_ASPECT * min(width, height):
            raise _bad(f"{what} is {width}x{height}; an image is at most {MAX_ASPECT} times as "
                       f"{'wide' if width > height else 'tall'} as it is "
                       f"{'tall' if width > height else 'wide'}.")
        if width * height > MAX_DECODED_PIXELS:
            _read_smaller(image, kind, what)
        if budget is not None:
            budget.take(width, height)
        try:
            image.seek(0)  # a GIF's (or an animated WebP's) first frame
            source.deadline = time.monotonic() + DECODE_SECONDS
            image.decodermaxblock = DECODE_BLOCK
            image.load()
            if kind == "jpeg":
                ImageOps.exif_transpose(image, in_place=True)  # a phone photo the right way up
            rgb = _rgb(image, kind)
        except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
            raise _bad(f"{what} has more than {MAX_PIXELS / 1e6:.0f} megapixels.") from None
        except TimeoutError:
            raise _bad(f"{what} took over {DECODE_SECONDS:g} s to decode; it was "
                       "not read.") from None
        except (OSError, ValueError, SyntaxError, EOFError) as e:
            raise _bad(f"{what} is damaged or cut short ({kind}: {e}).") from None
    return ChatImage(rgb, rgb.width, rgb.height, kind, _digest(rgb))


def _read_smaller(image, kind: str, what: str) -> None:
    """An image over MAX_DECODED_PIXELS: a JPEG decoded at 1/2, 1/4 or 1/8
    of its size (libjpeg scales as it decodes: `draft`), any other refused
    before it is decoded (a WebP decodes whole at ~16 bytes a pixel: 49 MP
    of a 2 KB WebP took 1 GB)."""
    width, height = image.size
    if kind == "jpeg":
        for scale in (2, 4, 8):
            if -(-width // scale) * -(-height // scale) <= MAX_DECODED_PIXELS:
                image.draft(None, (width // scale, height // scale))
                if image.size[0] * image.size[1] <= MAX_DECODED_PIXELS:
                    return
                break
    raise _bad(f"{what} is {width}x{height} ({width * height / 1e6:.0f} megapixels); a "
               f"{kind.upper()} is read up to {MAX_DECODED_PIXELS / 1e6:.0f} megapixels "
               f"(a JPEG up to {MAX_PIXELS / 1e6:.0f}): scale it down.")


def _digest(rgb) -> str:
    """BLAKE2b of the size and the RGB bytes, hashed a band of rows at a
    time (the same digest as of tobytes() whole, without its copy)."""
    digest = hashlib.blake2b(f"{rgb.width}x{rgb.height}:".encode(), digest_size=16)
    rows = max(1, (4 << 20) // (3 * rgb.width))
    for top in range(0, rgb.height, rows):
        digest.update(rgb.crop((0, top, rgb.width, min(top + rows, rgb.height))).tobytes())
    return digest.hexdigest()


class _Deadline(io.BytesIO):
    """An image's bytes that refuse to be read past `deadline` (a
    time.monotonic()): the decoder, fed a block at a time, stops there."""

    deadline = float("inf")

    def read(self, size: int | None = -1) -> bytes:
        if time.monotonic() >= self.deadline:
            raise TimeoutError
        return super().read(size)


MAX_JPEG_MARKERS = 1000  # segments walked at most: a real JPEG has a few dozen
_MARKER = re.compile(rb"\xff+[^\x00\x01\xd0-\xd8\xff]")  # not a stuffed 0, RST or SOI


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS segments) a JPEG's bytes hold, found as libjpeg
    finds markers: each segment skipped by its length (an SOS in an APP
    segment, an EXIF thumbnail's, is not counted), the bytes between
    segments searched for the next marker (0xFF not followed by a stuffed 0
    or a restart), up to EOI. Past MAX_JPEG_MARKERS segments it stops and
    answers more than that (refused either way)."""
    pos, scans, markers = 2, 0, 0
    while (found := _MARKER.search(data, pos)) is not None:
        marker = data[found.end() - 1]
        if marker == 0xD9:  # EOI: the decoder reads no further
            break
        markers += 1
        if markers > MAX_JPEG_MARKERS:
            return MAX_JPEG_MARKERS + 1
        if marker == 0xDA:
            scans += 1
        if found.end() + 2 > len(data):
            break
        pos = found.end() + int.from_bytes(data[found.end():found.end() + 2], "big")
    return scans


def _rgb(image, kind: str):
    """RGB; transparency over white (as a viewer shows it on a page). An RGB
    JPEG or PNG is itself (no copy; a WebP is copied: its file object holds
    the decoder's canvases)."""
    from PIL import Image as PILImage

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and
                                              "transparency" in image.info):
        rgba = image if image.mode == "RGBA" else image.convert("RGBA")
        white = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
        white.alpha_composite(rgba)  # in place: one image fewer at once
        del rgba
        return white.convert("RGB")
    return image if image.mode == "RGB" and kind in ("jpeg", "png") else image.convert("RGB")


def decode_data_url(url: str, what: str = "The image",
                    budget: ImageBudget | None = None) -> ChatImage:
    """A `data:image/...;base64,...` URL as a checked ChatImage."""
    found = _DATA_URL.match(url[:512])
    if found is None:
        raise _bad(f"{what} is not a data: URL (data:image/png;base64,...).")
    mime = (found.group("mime") or "").lower()
    if not mime.startswith("image/"):
        raise _bad(f"{what} is a data: URL of {mime or 'no type'}, not an image.")
    if not found.group("b64"):
        raise _bad(f"{what}'s data: URL is not base64 (data:{mime};base64,...).")
    return decode_base64(url[found.end():], what, budget)


def decode_base64(payload: str, what: str = "The image",
                  budget: ImageBudget | None = None) -> ChatImage:
    """An image's bytes in base64 (a data: URL's payload, an Anthropic image
    block's data) as a checked ChatImage; too long is refused before decoding."""
    if len(payload) > (MAX_IMAGE_BYTES * 4) // 3 + 8:
        raise _bad(f"{what} is over {MAX_IMAGE_BYTES >> 20} MiB.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{what} is not valid base64.") from None
    return decode_image(data, what, budget)


class ImageBudget:
    """A request's images together: at most MAX_IMAGES, and MAX_REQUEST_PIXELS
    in all, counted from each header before it is decoded."""

    def __init__(self, images: int = MAX_IMAGES, pixels: int = MAX_REQUEST_PIXELS):
        self.max_images, self.max_pixels = images, pixels
        self.images = self.pixels = 0

    def count(self) -> None:
        """One more image part (before its bytes are read)."""
        self.images += 1
        if self.images > self.max_images:
            raise _bad(f"The request has more than {self.max_images} images; at most "
                       f"{self.max_images} are read in one request.")

    def take(self, width: int, height: int) -> None:
        self.pixels += width * height
        if self.pixels > self.max_pixels:
            raise _bad(f"The request's images have over {self.max_pixels / 1e6:.0f} "
                       "megapixels in all.")
