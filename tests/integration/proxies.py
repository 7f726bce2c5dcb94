"""Registry proxies that misbehave on purpose, in front of a real registry on 127.0.0.1.

- `FaultyProxy` answers some manifest PUTs with a fault (a 503 once, a 403 always) and
  forwards everything else, request bodies sent with a Content-Length and chunked alike
  (Docker 20.10 uploads blobs chunked; the containerd store with a length).
- `StallingProxy` forwards everything but a blob upload's data, whose request it holds open
  without an answer: an engine then waits, retries and waits again for as long as it is let.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from typing import Any

HOP_HEADERS = ("content-length", "transfer-encoding", "connection")


def read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes | None:
    """The request's body, from a Content-Length or from chunks; None when it has none."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else None


class RegistryProxy:
    """Forwards every request to `upstream`; subclasses decide which to answer themselves."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                # The containerd image store tries https first and falls back to http only
                # when the answer starts with "HTTP/", as a Go server's does; Python's answers
                # a TLS hello as an HTTP/0.9 request, with no status line.
                if self.rfile.peek(1)[:1] == b"\x16":
                    self.wfile.write(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    self.close_connection = True
                    return
                super().handle_one_request()

            def _forward(self) -> None:
                if proxy.intercept(self):
                    return
                data = read_body(self)
                proxy.forward(self, data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def intercept(self, handler: Any) -> bool:
        """Answer `handler`'s request here instead of forwarding it; whether it did."""
        return False

    def forward(self, handler: Any, data: bytes | None) -> None:
        headers = {
            k: v for k, v in handler.headers.items() if k.lower() not in ("host", *HOP_HEADERS)
        }
        if data is not None and "content-type" not in {k.lower() for k in headers}:
            # urllib would say x-www-form-urlencoded, and the registry (Go) would then parse
            # the blob as a form, refusing one over 10 MB by dropping the connection.
            headers["Content-Type"] = "application/octet-stream"
        request = urllib.request.Request(
            f"http://{self.upstream}{handler.path}",
            data=data,
            method=handler.command,
            headers=headers,
        )
        try:
            response = urllib.request.urlopen(request, timeout=120)
        except urllib.error.HTTPError as exc:
            response = exc
        body = response.read()
        handler.send_response(response.status if hasattr(response, "status") else response.code)
        for key, value in response.headers.items():
            if key.lower() not in HOP_HEADERS:
                if key.lower() == "location":
                    value = value.replace(self.upstream, f"127.0.0.1:{self.port}")
                handler.send_header(key, value)
        # A HEAD's answer has no body but the length of the one a GET would have.
        length = response.headers.get("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", length or str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultyProxy(RegistryProxy):
    """Answers the first `times` manifest PUTs (all of them for -1) with `status` and `body`."""

    def __init__(self, upstream: str, status: int, times: int, body: bytes = b"") -> None:
        self.status, self.remaining, self.body = status, times, body
        self.faults = 0
        super().__init__(upstream)

    def intercept(self, handler: Any) -> bool:
        if handler.command != "PUT" or "/manifests/" not in handler.path or self.remaining == 0:
            return False
        read_body(handler)
        self.remaining -= 1
        self.faults += 1
        handler.send_response(self.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(self.body)))
        handler.end_headers()
        handler.wfile.write(self.body)
        return True


class StallingProxy(RegistryProxy):
    """Holds every blob upload that carries data (PATCH, or a PUT with a body) open with no
    answer until the client goes away; counts those it holds now and has held."""

    def __init__(self, upstream: str) -> None:
        self.holding = 0
        self.held = 0
        self.lock = threading.Lock()
        super().__init__(upstream)

    def intercept(self, handler: Any) -> bool:
        uploading = "/blobs/uploads/" in handler.path and (
            handler.command == "PATCH"
            or (handler.command == "PUT" and handler.headers.get("Content-Length", "0") != "0")
            or handler.headers.get("Transfer-Encoding", "").lower() == "chunked"
        )
        if not uploading:
            return False
        with self.lock:
            self.holding += 1
            self.held += 1
        try:
            # Take all the client sends and never answer: it waits for an answer that does
            # not come. A read that returns nothing means the client closed its side (read at
            # once, not slowly: a slow reader would see that only after draining megabytes).
            handler.connection.settimeout(1.0)
            while True:
                try:
                    if not handler.connection.recv(1 << 20):
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
        finally:
            with self.lock:
                self.holding -= 1
            handler.close_connection = True
        return True
