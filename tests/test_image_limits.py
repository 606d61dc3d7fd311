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


def _data_url(data: bytes, mime="image/jpeg") -> str:
    import base64

    return f"data:{mime};base64," + base64.b64encode(data).decode()


@pytest.fixture
def text_served(make_engine):
    from tests.test_server import Served

    s = Served(make_engine())
    yield s
    s.stop()


def test_a_text_model_refuses_images_before_any_is_decoded(text_served, monkeypatch):
    """Chat, Messages and Responses: a text model's request with an image is
    a 400 at its first image; no image is decoded (the decoders here fail
    the test if called), so a costly image costs a text model nothing."""
    import anthropic
    import base64

    import openai

    from server import image_urls

    decoded = []

    def decoder(*args, **kwargs):
        decoded.append(args[1] if len(args) > 1 else "?")
        raise AssertionError("an image was decoded for a text model")

    for name in ("decode_image", "decode_base64", "decode_data_url"):
        monkeypatch.setattr(image_urls, name, decoder)
    costly = _with_scans(_jpeg((256, 256), progressive=True), 90)
    client = text_served.client()
    with pytest.raises(openai.BadRequestError, match="cannot read images: it is a text model"):
        client.chat.completions.create(model="tiny", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {
                "url": _data_url(costly)}}, {"type": "text", "text": "?"}]}])
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        client.responses.create(model="tiny", max_output_tokens=2, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": _data_url(costly)},
                                         {"type": "input_text", "text": "?"}]}])
    with pytest.raises(anthropic.BadRequestError, match="cannot read images"):
        text_served.claude().messages.create(model="tiny", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/jpeg",
                "data": base64.b64encode(costly).decode()}}, {"type": "text", "text": "?"}]}])
    assert decoded == []
    answer = client.chat.completions.create(model="tiny", max_tokens=2, messages=[
        {"role": "user", "content": "hi"}])
    assert answer.choices[0].finish_reason in ("stop", "length")


@pytest.fixture(scope="module")
def vision_served(tmp_path_factory):
    from engine import Engine, LaneSpec, load_model
    from tests.test_server import Served
    from tests.vision_models import build_qwen25_vl

    path = build_qwen25_vl(tmp_path_factory.mktemp("qwen_vl") / "model")
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    served = Served(engine)
    yield served
    served.stop()
    engine.close()


def _png(size, color=(200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def _ask(client, *urls):
    return client.chat.completions.create(model="tiny", max_tokens=2, temperature=0, messages=[
        {"role": "user", "content": [*({"type": "image_url", "image_url": {"url": u}}
                                        for u in urls), {"type": "text", "text": "?"}]}])


def test_a_vision_model_refuses_each_bad_image_with_a_400(vision_served):
    """What a text model refuses at once, a vision model reads and refuses
    for what it is, the server answering on."""
    import anthropic
    import base64

    import openai

    from tests.test_images import _png_claiming

    client = vision_served.client()
    good = _data_url(_png((32, 24)), "image/png")
    claimed = _png_claiming(100_000, 100_000)
    for urls, said in [
        ((_data_url(b"GIF89a-but-not-really", "image/gif"),), "not an image Tandem reads"),
        ((_data_url(_png((32, 24))[:60], "image/png"),), "damaged or cut short|not an image"),
        ((_data_url(claimed, "image/png"),), "megapixels"),
        ((good,) * 17, "more than 16 images"),
        (("https://example.org/cat.png",), "--allow-image-urls"),
        ((_data_url(_with_scans(_jpeg(progressive=True), 200)),), "scans"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            _ask(client, *urls)
        assert e.value.status_code == 400, (said, e.value.message)
        assert any(s in e.value.message for s in said.split("|")), (said, e.value.message)
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                       "data": base64.b64encode(b"not a png").decode()}}
    with pytest.raises(anthropic.BadRequestError, match="not an image Tandem reads"):
        vision_served.claude().messages.create(model="tiny", max_tokens=2, messages=[
            {"role": "user", "content": [bad]}])
    assert _ask(client, good).choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("size", [(2010, 10), (4, 1000), (30000, 100)])
def test_an_image_over_200_to_1_is_a_400_not_a_500(vision_served, size):
    """Qwen's processor fails an image over 200:1 ("absolute aspect ratio
    must be smaller than 200"): the server said 500 with a traceback. The
    image is refused from its header, saying why; one at 200:1 is read."""
    import openai

    client = vision_served.client()
    with pytest.raises(openai.BadRequestError, match=r"at most 200 times as (wide|tall)"):
        _ask(client, _data_url(_png(size), "image/png"))
    short = min(size)  # 200:1 passes, even scaled down to the model's ~1 MP
    at_limit = (200 * short, short) if size[0] > size[1] else (short, 200 * short)
    assert _ask(client, _data_url(_png(at_limit), "image/png")).choices[0].finish_reason \
        in ("stop", "length")


def test_what_is_decoded_is_at_most_max_decoded_pixels():
    """A 2 KB WebP of 49 MP decoded whole at ~16 bytes a pixel (its peak
    was ~1 GB): refused from its header now (measured: 1055 MB peak before,
    26 MB after). A 30 MP JPEG is decoded at half its size by libjpeg (its
    peak 331 MB at 23 MP before, 125 MB after)."""
    big = io.BytesIO()
    Image.new("RGB", (7000, 7000), (10, 200, 30)).save(big, "WEBP", lossless=True)
    assert len(big.getvalue()) < 4096
    with pytest.raises(EngineError, match=r"7000x7000 \(49 megapixels\); a WEBP is read up "
                                          r"to 24 megapixels \(a JPEG up to 50\)"):
        decode_image(big.getvalue())
    photo = decode_image(_jpeg((6000, 5000), quality=10))
    assert (photo.width, photo.height, photo.pixels.size) == (3000, 2500, (3000, 2500))


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "GIF"])
def test_past_the_decoded_cap_only_a_jpeg_is_read_smaller(monkeypatch, fmt):
    monkeypatch.setattr(images_module, "MAX_DECODED_PIXELS", 1000)
    out = io.BytesIO()
    Image.new("RGB", (40, 25), (1, 2, 3)).save(out, fmt)  # 1000 pixels: read
    assert decode_image(out.getvalue()).width == 40
    out = io.BytesIO()
    Image.new("RGB", (41, 25), (1, 2, 3)).save(out, fmt)
    with pytest.raises(EngineError, match=rf"41x25 .*; a {fmt} is read up to 0 megapixels"):
        decode_image(out.getvalue())
    # A JPEG is decoded at 1/2, 1/4 or 1/8 of its size, the first that fits.
    for size, read in [((64, 48), (32, 24)), ((200, 100), (25, 13)), ((63, 31), (32, 16))]:
        image = decode_image(_jpeg(size))
        assert image.pixels.size == (image.width, image.height) == read
    with pytest.raises(EngineError, match="scale it down"):  # 1/8 is not enough
        decode_image(_jpeg((400, 200)))


def test_the_digest_is_of_the_whole_rgb_bytes():
    """Hashed a band of rows at a time: the digest a whole tobytes() gives."""
    import hashlib

    picture = Image.new("RGB", (700, 3000))
    picture.putdata([(x % 256, y % 256, (x * y) % 256) for y in range(3000) for x in range(0, 700)])
    out = io.BytesIO()
    picture.save(out, "PNG")
    whole = hashlib.blake2b(b"700x3000:" + picture.tobytes(), digest_size=16).hexdigest()
    assert decode_image(out.getvalue()).digest == whole


def test_a_photo_s_orientation_is_applied_in_place():
    photo = Image.new("RGB", (60, 20), (1, 2, 3))
    exif = photo.getexif()
    exif[0x0112] = 6  # rotated 90 degrees
    out = io.BytesIO()
    photo.save(out, "JPEG", exif=exif)
    image = decode_image(out.getvalue())
    assert (image.width, image.height, image.pixels.size) == (20, 60, (20, 60))
