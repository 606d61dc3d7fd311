"""Image URLs under `tandem serve --allow-image-urls` (server/image_urls.py),
against a real HTTP server on 127.0.0.1: the default fetcher refuses every
local or private address before connecting; a fetcher that may reach the
test's own server (its `allowed` test says loopback) gets an image, and
refuses a redirect, an answer over the size limit (declared or streamed), a
server that never answers or drips bytes past the deadline, a 404, a URL
with credentials. Through the real openai, anthropic clients and the
Responses API: an image URL reaches the vision model and answers as a data:
URL of the same image does; a Responses image is kept for
previous_response_id and its KV found again."""

from __future__ import annotations

import base64
import http.server
import io
import ipaddress
import socket
import threading
import time

import openai
import pytest
from PIL import Image

from engine import Engine, EngineError, LaneSpec, SamplingParams, load_model
from server.image_urls import ImageFetcher, RequestImages, public_address
from tests.vision_models import build_qwen25_vl

RED = (200, 30, 30)


def _png(color=RED, size=(64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
    "100.64.0.1", "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::",
    "fe80::1", "fc00::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::1",
    "2002:a00:1::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "ff02::1"])
def test_local_and_private_addresses_are_not_public(address):
    assert not public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
                                     "::ffff:8.8.8.8", "2002:808:808::1"])
def test_public_addresses_are(address):
    assert public_address(ipaddress.ip_address(address))


class _Site:
    """A real HTTP server on 127.0.0.1 with the answers the tests need; it
    records each path asked for. /slow and /drip hold until `release`."""

    def __init__(self, tls=None):
        self.asked: list[str] = []
        self.release = threading.Event()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                site.asked.append(self.path)
                if self.path == "/red.png":
                    self._send(200, _png())
                elif self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/red.png")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/big":  # declares more than the limit
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                elif self.path == "/endless":  # no length: streams past the limit
                    self.send_response(200)
                    self.end_headers()
                    try:
                        while not site.release.is_set():
                            self.wfile.write(b"\0" * 65536)
                    except OSError:
                        pass
                elif self.path == "/slow":  # never answers until released
                    site.release.wait(60)
                elif self.path in ("/drip-status", "/drip-headers", "/drip-chunked"):
                    self._drip()
                elif self.path == "/drip":  # a byte at a time, each well within a read's wait
                    self.send_response(200)
                    self.end_headers()
                    try:
                        while not site.release.wait(0.05):
                            self.wfile.write(b"\0")
                            self.wfile.flush()
                    except OSError:
                        pass
                else:
                    self._send(404, b"no")

            def _drip(self):
                """The status line, a header or a chunk's size line (each padded
                to 400 bytes) a byte every 50 ms, each read's wait short: the
                answer whole after 20 s, or at once when released."""
                pad = b"x" * 400
                body = _png()
                parts = [b"HTTP/1.1 200 OK" + (pad if self.path == "/drip-status" else b""),
                         b"\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n",
                         b"X-Pad: " + pad if self.path == "/drip-headers" else b"X-Pad: 1",
                         b"\r\n\r\n" + f"{len(body):x}".encode(),
                         b";" + pad if self.path == "/drip-chunked" else b"",
                         b"\r\n" + body + b"\r\n0\r\n\r\n"]
                answer = b"".join(parts)
                start = answer.index(pad) if pad in answer else len(answer)
                try:
                    self.wfile.write(answer[:start])
                    for i in range(start, start + len(pad)):
                        self.wfile.write(answer[i:i + 1])
                        self.wfile.flush()
                        if site.release.wait(0.05):
                            break
                    self.wfile.write(answer[i + 1:])
                except OSError:
                    pass
                self.close_connection = True

            def _send(self, status, body):
                self.send_response(status)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:  # https: each connection's handshake as it is accepted
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        # (polled every 50 ms: shutdown() waits for a poll, 0.5 s by default)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       kwargs={"poll_interval": 0.05})
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site():
    s = _Site()
    yield s
    s.stop()


def _loopback(ip) -> bool:
    return ip.is_loopback


def test_the_default_fetcher_never_connects_to_a_local_address(site):
    fetcher = ImageFetcher()
    for url in (site.url("/red.png"), site.url("/red.png", "localhost"),
                site.url("/red.png", "[::ffff:127.0.0.1]")):
        with pytest.raises(EngineError, match="local or private address"):
            fetcher.fetch(url)
    assert site.asked == []  # refused before any connection


def test_a_fetch_gets_the_image_and_refuses_what_it_must(site):
    fetcher = ImageFetcher(allowed=_loopback, seconds=1.0, max_bytes=1 << 20)
    # The deadline /slow and /drip are cut at is waited for whole: short there.
    hasty = ImageFetcher(allowed=_loopback, seconds=0.3, max_bytes=1 << 20)
    assert fetcher.fetch(site.url("/red.png")) == _png()
    for path, said, by in [("/redirect", r"redirect \(302\); redirects are not followed",
                            fetcher),
                           ("/big", "over 1 MiB", fetcher), ("/endless", "over 1 MiB", fetcher),
                           ("/slow", "did not answer in time \\(0.3 s an image", hasty),
                           ("/drip", "did not answer in time \\(0.3 s an image", hasty),
                           ("/missing", "answered 404", fetcher)]:
        with pytest.raises(EngineError, match=said):
            by.fetch(site.url(path))
    assert "/red.png" not in site.asked[1:]  # the redirect was not followed
    closed = socket.socket()  # bound, not listening: a connection is refused
    closed.bind(("127.0.0.1", 0))
    try:
        for url, said in [(f"http://user:pw@127.0.0.1:{site.port}/red.png", "credentials"),
                          (f"ftp://127.0.0.1:{site.port}/red.png", "must be http"),
                          ("http://no-such-host.invalid/a.png", "was not found"),
                          (f"http://127.0.0.1:{closed.getsockname()[1]}/x",
                           "could not be fetched")]:
            with pytest.raises(EngineError, match=said):
                fetcher.fetch(url)
    finally:
        closed.close()


@pytest.mark.parametrize("path", ["/drip-status", "/drip-headers", "/drip-chunked"])
def test_the_deadline_covers_the_status_line_headers_and_chunk_sizes(site, path):
    """A host dripping its status line, its headers or a chunk's size line
    (each read waits briefly, the answer would come after 20 s) is cut at the
    fetch's deadline: the whole fetch is bounded, not each read (each read
    returns within 50 ms, well inside the 0.3 s deadline)."""
    fetcher = ImageFetcher(allowed=_loopback, seconds=0.3)
    started = time.monotonic()
    with pytest.raises(EngineError, match="did not answer in time \\(0.3 s an image"):
        fetcher.fetch(site.url(path))
    assert time.monotonic() - started < 10  # generous: the drip would take 20 s
    site.release.set()  # the same answer at once is read whole
    assert ImageFetcher(allowed=_loopback, seconds=5.0).fetch(site.url(path)) == _png()


def test_a_request_s_fetches_share_one_deadline(site):
    """Past the request's deadline, the next image is not even asked for."""
    images = RequestImages(ImageFetcher(allowed=_loopback, seconds=5.0))
    assert images.url(site.url("/red.png"), "The image").width == 64
    images.until = time.monotonic() - 1  # its 30 s spent
    with pytest.raises(EngineError, match="did not answer in time"):
        images.url(site.url("/red.png"), "The image")
    assert site.asked == ["/red.png"]


@pytest.fixture(scope="module")
def vision_engine(tmp_path_factory):
    path = build_qwen25_vl(tmp_path_factory.mktemp("qwen_vl") / "model")
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    yield engine
    engine.close()


def _reference(engine, text="What is it?") -> str:
    from engine import decode_image

    image = decode_image(_png())
    messages = [{"role": "user", "content": text, "images": [image],
                 "parts": [{"type": "image", "index": 0}, {"type": "text", "text": text}]}]
    return engine.submit(engine.prepare(messages),
                         SamplingParams(max_tokens=8, temperature=0.0)).result(120).text


def test_the_api_reads_image_urls_only_when_allowed(vision_engine, site):
    from tests.test_server import Served

    expected = _reference(vision_engine)
    fetcher = ImageFetcher(allowed=_loopback, seconds=2.0)
    allowed = Served(vision_engine, image_urls=fetcher)
    default = Served(vision_engine, image_urls=ImageFetcher())
    refusing = Served(vision_engine)
    try:
        def ask(served, url):
            return served.client().chat.completions.create(
                model="tiny", max_tokens=8, temperature=0, messages=[{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "What is it?"}]}])

        assert ask(allowed, site.url("/red.png")).choices[0].message.content == expected
        claude = allowed.claude()
        answer = claude.messages.create(model="tiny", max_tokens=8, messages=[
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": site.url("/red.png")}},
                {"type": "text", "text": "What is it?"}]}])
        assert answer.content[0].text == expected
        for served, url, said in [(allowed, site.url("/redirect"), "redirects are not followed"),
                                  (allowed, site.url("/slow"), "did not answer in time"),
                                  (default, site.url("/red.png"), "local or private address"),
                                  (refusing, site.url("/red.png"), "--allow-image-urls")]:
            # (the deadline /slow is cut at, waited for whole: short for it alone)
            fetcher.seconds = 0.3 if url == site.url("/slow") else 2.0
            with pytest.raises(openai.BadRequestError, match=said):
                ask(served, url)
        # and each server answers on
        assert ask(allowed, site.url("/red.png")).choices[0].message.content == expected
        text = refusing.client().chat.completions.create(
            model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
        assert text.choices[0].message.content is not None
    finally:
        for served in (allowed, default, refusing):
            served.stop()


def test_the_responses_api_reads_an_input_image_and_keeps_it(vision_engine):
    from tests.test_server import Served

    expected = _reference(vision_engine)
    served = Served(vision_engine)
    try:
        client = served.client()
        url = "data:image/png;base64," + base64.b64encode(_png()).decode()
        first = client.responses.create(model="tiny", max_output_tokens=8, temperature=0,
                                        input=[{"role": "user", "content": [
                                            {"type": "input_image", "image_url": url},
                                            {"type": "input_text", "text": "What is it?"}]}])
        assert first.output_text == expected
        follow = client.responses.create(model="tiny", max_output_tokens=4, temperature=0,
                                         previous_response_id=first.id, input="And its color?")
        # The image came again from the stored response: its KV was found.
        assert follow.usage.input_tokens_details.cached_tokens > first.usage.input_tokens // 2
        for part, said in [({"type": "input_image", "file_id": "file-1"}, "file_id"),
                           ({"type": "input_image", "image_url": "data:text/plain;base64,aGk="},
                            "not an image"),
                           ({"type": "input_file", "file_data": "x"}, "not supported")]:
            with pytest.raises(openai.BadRequestError, match=said):
                client.responses.create(model="tiny", max_output_tokens=4, input=[
                    {"role": "user", "content": [part, {"type": "input_text", "text": "?"}]}])
        with pytest.raises(openai.BadRequestError, match="user messages only"):
            client.responses.create(model="tiny", max_output_tokens=4, input=[
                {"role": "system", "content": [{"type": "input_image", "image_url": url}]},
                {"role": "user", "content": "?"}])
    finally:
        served.stop()


def test_https_checks_the_certificate_and_its_host_name(tmp_path):
    """A real TLS server on 127.0.0.1 with a certificate from a test
    authority (trustme): trusted, the image comes; by the system's
    authorities, or for another host name, the fetch fails saying so."""
    import ssl

    import trustme

    authority = trustme.CA()
    served = {}
    for name, hosts in (("good", ["localhost", "127.0.0.1"]), ("other", ["example.org"])):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        authority.issue_cert(*hosts).configure_cert(context)
        served[name] = _Site(context)
    try:
        trusting = ssl.create_default_context()
        authority.configure_trust(trusting)
        fetcher = ImageFetcher(allowed=_loopback, seconds=5.0, context=trusting)
        good = f"https://localhost:{served['good'].port}/red.png"
        assert fetcher.fetch(good) == _png()
        with pytest.raises(EngineError, match="could not be fetched.*CERTIFICATE_VERIFY_FAILED"):
            ImageFetcher(allowed=_loopback, seconds=5.0).fetch(good)
        with pytest.raises(EngineError, match="could not be fetched.*(hostname|match)"):
            fetcher.fetch(f"https://localhost:{served['other'].port}/red.png")
    finally:
        for site in served.values():
            site.stop()
