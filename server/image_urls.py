"""A request's images: data: URLs and base64 always; http(s) URLs only when
the server was started with `--allow-image-urls`, and then fetched held in.

A URL in a request body is the client's choice, and the server would fetch it
from inside the user's network: without limits that is server-side request
forgery (a web page that can reach the local API could make it read the
router's admin page or a cloud metadata address), and a slow or endless
answer would hold a worker. So a fetch:
- takes http and https only, without credentials in the URL;
- resolves the host once, and every address it resolves to must be public
  (not loopback, private, link-local, shared, multicast, reserved or
  unspecified, nor an IPv4-mapped or 6to4 form of one); it then connects to
  the address it checked, so a second lookup (DNS rebinding) cannot answer
  otherwise; a proxy from the environment is not used;
- follows no redirect (a 3xx is refused: that is how a public URL reaches a
  private one);
- needs a 200 whose body is at most MAX_IMAGE_BYTES (a Content-Length over it
  is refused before reading), all of it within FETCH_SECONDS from the first
  connect: the connect and the TLS handshake wait at most what is left, and
  every read (the status line, the headers, a chunk's size, the body) waits
  at most what is left then (`_DeadlineSocket`), so a host dripping a byte
  at a time, anywhere in its answer, is cut at the deadline; and a
  request's fetches together within
  REQUEST_FETCH_SECONDS (they hold one of the server's parsing threads);
- then decodes the bytes as a data: URL's are (engine/images.py: the format,
  the pixel cap, a decompression bomb, the request's budget).
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import socket
import ssl
import time
import urllib.parse
from typing import Callable

from engine import EngineError
from engine.images import (MAX_IMAGE_BYTES, ChatImage, ImageBudget, decode_base64,
                           decode_data_url, decode_image)

FETCH_SECONDS = 10.0  # one image: connect, answer and body together
REQUEST_FETCH_SECONDS = 30.0  # all of one request's fetches (a worker thread waits on them)
CHUNK = 64 << 10


def _bad(why: str) -> EngineError:
    return EngineError(why, "bad-argument")


def public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an address is on the public internet: what a fetch may reach."""
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif ip.teredo is not None:
            return False
    return bool(ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_loopback
                                      or ip.is_link_local or ip.is_unspecified
                                      or ip.is_private))


class ImageFetcher:
    """Fetches image URLs as the module says. `allowed` decides which
    addresses a fetch may reach (public_address; a test serving images on
    127.0.0.1 passes its own), `seconds` the whole fetch's time, `context`
    whom https trusts (None: the system's certificate authorities,
    hostnames checked)."""

    def __init__(self, allowed: Callable[[object], bool] = public_address,
                 seconds: float = FETCH_SECONDS, max_bytes: int = MAX_IMAGE_BYTES,
                 context: ssl.SSLContext | None = None):
        self.allowed, self.seconds, self.max_bytes = allowed, seconds, max_bytes
        self.context = context

    def fetch(self, url: str, what: str = "The image", until: float | None = None) -> bytes:
        """The bytes at `url`, within `self.seconds` (and by `until`, a
        time.monotonic() the request's fetches must end by)."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise _bad(f"{what}'s URL must be http(s)://host/...")
        if parts.username or parts.password:
            raise _bad(f"{what}'s URL carries credentials; they are not sent.")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise _bad(f"{what}'s URL has a bad port.") from None
        deadline = time.monotonic() + self.seconds
        if until is not None:
            deadline = min(deadline, until)
        address = self._address(parts.hostname, port, what)
        try:
            return self._get(scheme, parts, port, address, deadline, what)
        except (OSError, http.client.HTTPException, ssl.SSLError) as e:
            if time.monotonic() >= deadline or isinstance(e, TimeoutError):
                raise _bad(f"{what}: {parts.hostname} did not answer in time ("
                           f"{self.seconds:g} s an image, {REQUEST_FETCH_SECONDS:g} s a "
                           "request).") from None
            raise _bad(f"{what} could not be fetched from {parts.hostname} "
                       f"({type(e).__name__}: {str(e)[:120]}).") from None

    def _address(self, host: str, port: int, what: str) -> str:
        """The one address to connect to; every address of `host` checked."""
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise _bad(f"{what}: the host {host[:80]!r} was not found.") from None
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in found]
        refused = [a for a in addresses if not self.allowed(a)]
        if refused or not addresses:
            raise _bad(f"{what}: {host[:80]} is a local or private address ({refused[0]}); "
                       "image URLs are fetched from public addresses only."
                       if refused else f"{what}: the host {host[:80]!r} was not found.")
        return str(addresses[0])

    def _get(self, scheme, parts, port, address, deadline, what) -> bytes:
        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            return remaining

        sock = socket.create_connection((address, port), timeout=left())
        if scheme == "https":
            context = self.context or ssl.create_default_context()
            try:
                sock.settimeout(left())  # the whole handshake (CPython: one deadline)
                sock = context.wrap_socket(sock, server_hostname=parts.hostname)
            except BaseException:  # a failed handshake: the plain socket closed too
                sock.close()
                raise
            conn = http.client.HTTPSConnection(parts.hostname, port, timeout=left(),
                                               context=context)
        else:
            conn = http.client.HTTPConnection(parts.hostname, port, timeout=left())
        # Connected to the address checked (no second lookup); every read and
        # write from here waits at most until the deadline.
        conn.sock = _DeadlineSocket(sock, left)
        try:
            target = parts.path or "/"
            if parts.query:
                target += "?" + parts.query
            conn.request("GET", target, headers={"User-Agent": "Tandem",
                                                 "Accept": "image/*"})
            answer = conn.getresponse()
            if 300 <= answer.status < 400:
                raise _bad(f"{what}: {parts.hostname} answered with a redirect "
                           f"({answer.status}); redirects are not followed.")
            if answer.status != 200:
                raise _bad(f"{what}: {parts.hostname} answered {answer.status} "
                           f"{answer.reason[:60]}.")
            length = answer.getheader("Content-Length")
            if length and length.isdigit() and int(length) > self.max_bytes:
                raise self._too_big(what)
            body = bytearray()
            while True:
                chunk = answer.read1(CHUNK)
                if not chunk:
                    return bytes(body)
                body += chunk
                if len(body) > self.max_bytes:
                    raise self._too_big(what)
        finally:
            conn.close()
            sock.close()

    def _too_big(self, what: str) -> EngineError:
        return _bad(f"{what} is over {self.max_bytes >> 20} MiB; an image is at most "
                    f"{self.max_bytes >> 20} MiB.")


class _DeadlineSocket:
    """A connected socket as http.client uses it (sendall, makefile),
    each read and write waiting at most `left()` (which raises TimeoutError
    once the deadline has passed): a socket's own timeout starts again at
    every byte, so a host sending one byte a second would hold a fetch for
    as long as it liked."""

    def __init__(self, sock: socket.socket, left: Callable[[], float]):
        self.sock, self.left = sock, left

    def sendall(self, data) -> None:
        self.sock.settimeout(self.left())
        self.sock.sendall(data)  # one deadline for the whole call (CPython)

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        pass  # the answer may still read (http.client closes early): _get closes the socket


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes; each read waits at most what is left."""

    def __init__(self, timed: _DeadlineSocket):
        self.timed = timed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.timed.sock.settimeout(self.timed.left())
        return self.timed.sock.recv_into(buffer)


def cannot_read_images(model: str) -> str:
    return (f"The model {model} cannot read images: it is a text model. Load a vision model "
            "(Qwen2.5-VL, SmolVLM, Gemma 3, ...) to send images.")


class ServerImages:
    """How a server's requests read images: `fetcher` reads http(s) URLs
    (None: refused), `refusal()` says why every image is refused now (the
    model loaded reads none), or None. The server passes it where a body's
    parser takes a fetcher (server/flow.py's ServerState)."""

    def __init__(self, fetcher: ImageFetcher | None,
                 refusal: Callable[[], str | None] = lambda: None):
        self.fetcher, self.refusal = fetcher, refusal


class RequestImages:
    """One request's images: its budget (engine/images.ImageBudget), how a
    URL is read (`fetcher`: None unless --allow-image-urls), and, given a
    ServerImages, whether the model reads images at all: a text model's
    request is refused at its first image, before anything is fetched or
    decoded."""

    def __init__(self, fetcher: ImageFetcher | ServerImages | None = None):
        self.refusal: Callable[[], str | None] = lambda: None
        if isinstance(fetcher, ServerImages):
            fetcher, self.refusal = fetcher.fetcher, fetcher.refusal
        self.budget, self.fetcher = ImageBudget(), fetcher
        self.until: float | None = None  # set at the first fetch

    def _count(self) -> None:
        """One more image part, before its bytes are read."""
        why = self.refusal()
        if why:
            raise _bad(why)
        self.budget.count()

    def url(self, url: str, what: str) -> ChatImage:
        """An image URL: data: always, http(s) through the fetcher."""
        self._count()
        if url[:8].lower().startswith(("http://", "https://")):
            if self.fetcher is None:
                raise _bad("Image URLs are not fetched by this server (start it with "
                           "--allow-image-urls to allow it); send the image as a data: URL "
                           "(data:image/png;base64,...).")
            if self.until is None:
                self.until = time.monotonic() + REQUEST_FETCH_SECONDS
            return decode_image(self.fetcher.fetch(url, what, self.until), what, self.budget)
        return decode_data_url(url, what, self.budget)

    def base64(self, payload: str, what: str) -> ChatImage:
        self._count()
        return decode_base64(payload, what, self.budget)
