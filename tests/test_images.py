"""Images from outside, checked before any model sees them (issue 37,
first part: engine/images.py and the API's image parts): each format read
by its bytes, a GIF's first frame, transparency over white, the digest
that will key the prefix cache; every bad input refused with a clear
message (not an image, a truncated PNG, a decompression bomb, over the
pixel cap, too many images, a bad data: URL, an http URL); and through the
real openai client, a 400 for each and the server answering on."""

from __future__ import annotations

import base64
import io
import random
import struct
import zlib

import openai
import pytest
from PIL import Image

from engine import EngineError, ImageBudget, decode_data_url, decode_image
from engine import images as images_module


def _encoded(image: Image.Image, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def _picture(size=(32, 24), seed=0) -> Image.Image:
    image = Image.new("RGB", size)
    image.putdata([((x * 7 + seed) % 256, (y * 13) % 256, (x * y + seed) % 256)
                   for y in range(size[1]) for x in range(size[0])])
    return image


def _data_url(data: bytes, mime="image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width`x`height` (a decompression bomb's
    shape: a few bytes that would decode to gigabytes)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def test_each_format_is_read_by_its_bytes_and_named_by_its_pixels():
    picture = _picture()
    png = decode_image(_encoded(picture, "PNG"))
    assert (png.format, png.width, png.height) == ("png", 32, 24)
    webp = decode_image(_encoded(picture, "WEBP", lossless=True))
    assert webp.format == "webp" and webp.digest == png.digest  # the same pixels
    jpeg = decode_image(_encoded(picture, "JPEG", quality=95))
    assert jpeg.format == "jpeg" and jpeg.digest != png.digest  # lossy: other pixels
    other = decode_image(_encoded(_picture(seed=1), "PNG"))
    assert (other.width, other.height) == (32, 24) and other.digest != png.digest
    # A GIF gives its first frame; transparency lies over white.
    frames = [Image.new("P", (8, 8), 1), Image.new("P", (8, 8), 2)]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    first = decode_image(gif.getvalue())
    assert first.format == "gif" and first.pixels.mode == "RGB"
    assert first.digest == decode_image(_encoded(frames[0], "GIF")).digest
    clear = decode_image(_encoded(Image.new("RGBA", (4, 4), (0, 0, 0, 0)), "PNG"))
    assert clear.pixels.getpixel((0, 0)) == (255, 255, 255)
    # The declared type is not trusted: a JPEG sent as image/png is a JPEG.
    assert decode_data_url(_data_url(_encoded(picture, "JPEG"), "image/png")).format == "jpeg"


@pytest.mark.parametrize("data, said", [
    (b"%PDF-1.7 not a picture", "not an image Tandem reads"),
    (_encoded(_picture(), "PNG")[:120], "damaged or cut short"),
    (_png_claiming(100_000, 100_000), "megapixels"),
    (_png_claiming(8_000, 8_000), r"8000x8000 \(64 megapixels\); an image is at most 50"),
    (_encoded(_picture(), "BMP"), "is a BMP; Tandem reads PNG, JPEG, WebP and GIF"),
    (b"", "not an image Tandem reads"),
])
def test_bad_images_are_refused_saying_why(data, said):
    with pytest.raises(EngineError, match=said):
        decode_image(data)


def test_the_limits_hold_per_image_and_per_request(monkeypatch):
    monkeypatch.setattr(images_module, "MAX_IMAGE_BYTES", 100)
    with pytest.raises(EngineError, match="an image is at most 0 MiB"):
        decode_image(_encoded(_picture(), "PNG"))
    monkeypatch.undo()
    budget = ImageBudget(images=2, pixels=1000)
    decode_image(_encoded(_picture((20, 20)), "PNG"), budget=budget)
    budget.count()
    budget.count()
    with pytest.raises(EngineError, match="more than 2 images"):
        budget.count()
    with pytest.raises(EngineError, match="over 0 megapixels in all"):
        decode_image(_encoded(_picture((30, 30)), "PNG"), budget=budget)


@pytest.mark.parametrize("url, said", [
    ("data:text/plain;base64,aGVsbG8=", "of text/plain, not an image"),
    ("data:image/png,rawbytes", "is not base64"),
    ("data:image/png;base64,@@@", "not valid base64"),
    ("file:///etc/passwd", "not a data: URL"),
])
def test_bad_data_urls_are_refused(url, said):
    with pytest.raises(EngineError, match=said):
        decode_data_url(url)


@pytest.fixture
def served(make_engine):
    from tests.test_server import Served

    s = Served(make_engine())
    yield s
    s.stop()


def _ask(client, *parts, text="What is in the picture?"):
    return client.chat.completions.create(model="tiny", max_tokens=4, messages=[
        {"role": "user", "content": [{"type": "text", "text": text}, *parts]}])


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def test_the_api_refuses_each_bad_image_and_answers_on(served):
    client = served.client()
    good = _image_part(_data_url(_encoded(_picture(), "PNG")))
    # A text model refuses an image at once, before reading it, however bad
    # (each case below is refused for what it is by a vision model:
    # tests/test_image_limits.py).
    text_model = "cannot read images: it is a text model"
    cases = [
        ((good,), text_model),
        ((_image_part(_data_url(b"GIF89a-but-not-really")),), text_model),
        ((_image_part(_data_url(_encoded(_picture(), "PNG")[:120])),), text_model),
        ((_image_part(_data_url(_png_claiming(100_000, 100_000))),), text_model),
        ((good,) * 50, text_model),
        ((_image_part("https://example.org/cat.png"),), text_model),
        (({"type": "image_url", "image_url": {"detail": "low"}},), "needs a url"),
        (({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},),
         "only text parts"),
    ]
    for parts, said in cases:
        with pytest.raises(openai.BadRequestError) as e:
            _ask(client, *parts)
        assert said in e.value.message, (said, e.value.message)
    # An image in an assistant's turn is not read either.
    with pytest.raises(openai.BadRequestError, match="user messages only"):
        client.chat.completions.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [good]}, {"role": "user", "content": "so?"}])
    # A body over 4 MiB with no image: 413, saying what a body with images may be.
    with pytest.raises(openai.APIStatusError) as e:
        _ask(client, text="x" * (5 << 20))
    assert e.value.status_code == 413 and "up to 64 MiB" in e.value.message
    # ... and one with a 5 MiB image is taken (then refused: a text model).
    big = Image.frombytes("RGB", (1400, 1400), random.Random(0).randbytes(1400 * 1400 * 3))
    photo = _encoded(big, "PNG")
    assert len(photo) > 4 << 20
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        _ask(client, _image_part(_data_url(photo)))
    answer = client.chat.completions.create(model="tiny", max_tokens=4, messages=[
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_the_messages_api_refuses_images_a_text_model_cannot_read(served):
    import anthropic

    claude = served.claude()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(_encoded(_picture(),
                                                                           "PNG")).decode()}}
    with pytest.raises(anthropic.BadRequestError, match="cannot read images"):
        claude.messages.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": [block, {"type": "text", "text": "?"}]}])
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                       "data": base64.b64encode(b"not a png").decode()}}
    with pytest.raises(anthropic.BadRequestError, match="cannot read images"):  # not decoded
        claude.messages.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": [bad]}])
    answer = claude.messages.create(model="tiny", max_tokens=4, messages=[
        {"role": "user", "content": "hello"}])
    assert answer.stop_reason in ("end_turn", "max_tokens")
