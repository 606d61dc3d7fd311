"""A local stand-in for the Hugging Face Hub's HTTP API, enough for
`huggingface_hub.snapshot_download` of one repo: revision info, the file
tree, HEAD (metadata) and GET (bytes, optionally paced) of each file, and a
model search (`HfApi.list_models`) that finds that repo.
It lets the download path run for real (huggingface_hub, threads, progress,
cancel, the cache layout) without the network."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repo_id: str, folder: Path, seconds_per_mib: float = 0.0,
                 tags: tuple[str, ...] = ("mlx", "safetensors")):
        self.repo_id = repo_id
        self.tags = list(tags)
        self.files = {p.relative_to(folder).as_posix(): p.read_bytes()
                      for p in sorted(folder.rglob("*")) if p.is_file()}
        self.seconds_per_mib = seconds_per_mib
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._serve(self, body=False)

            def do_GET(self):
                hub._serve(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # (polled every 50 ms: shutdown() waits for a poll, 0.5 s by default)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- responses -------------------------------------------------------------
    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append(f"{h.command} {path}")
        api = f"/api/models/{self.repo_id}/"
        if path == "/api/models":  # search: this one repo, when the text matches
            query = parse_qs(urlparse(h.path).query)
            search = (query.get("search") or [""])[0].lower()
            found = search in self.repo_id.lower()
            return self._json(h, [{"id": self.repo_id, "modelId": self.repo_id,
                                   "usedStorage": sum(len(d) for d in self.files.values()),
                                   "downloads": 7, "tags": self.tags}] if found else [])
        resolve = f"/{self.repo_id}/resolve/"
        if path.startswith(api + "revision/"):
            siblings = [{"rfilename": name} for name in self.files]
            return self._json(h, {"id": self.repo_id, "sha": COMMIT, "siblings": siblings})
        if path.startswith(api + "tree/"):
            return self._json(h, [{"type": "file", "path": name, "size": len(data),
                                   "oid": hashlib.sha1(data).hexdigest()}
                                  for name, data in self.files.items()])
        if path.startswith(resolve):
            name = path[len(resolve):].split("/", 1)[1]
            if name in self.files:
                return self._file(h, name, body)
        h.send_response(404)
        h.send_header("X-Error-Code", "RepoNotFound" if not path.startswith(resolve)
                      else "EntryNotFound")
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _json(self, h, payload) -> None:
        data = json.dumps(payload).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _file(self, h, name: str, body: bool) -> None:
        data = self.files[name]
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        h.send_header("X-Repo-Commit", COMMIT)
        h.end_headers()
        if not body:
            return
        chunk = 64 * 1024
        for start in range(0, len(data), chunk):
            h.wfile.write(data[start:start + chunk])
            if self.seconds_per_mib:
                # A slow Hub is the behaviour under test (a download still
                # running when it is cancelled): the server's pace, not a wait.
                time.sleep(self.seconds_per_mib * chunk / (1 << 20))
