"""The registry adapter against a real HTTP server on loopback: retries, deadlines and hints."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
import requests

from imagekit.adapters.registry import HttpRegistry, push
from imagekit.errors import RegistryError
from imagekit.kernel.retry import Backoff
from tests.fakes import FakePushClient, FakePushResponse

CONFIG = "sha256:" + "c" * 64
DIGEST = "sha256:" + "d" * 64


class Registry(BaseHTTPRequestHandler):
    """Answers each manifest GET with the next status of `plan` (then the last one again)."""

    plan: ClassVar[list[int]] = [200]
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        status = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
        body = json.dumps({"config": {"digest": CONFIG}}).encode() if status == 200 else b"{}"
        self.send_response(status)
        self.send_header("Docker-Content-Digest", DIGEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    """A registry on 127.0.0.1 (plain HTTP, as imagekit speaks to loopback registries)."""
    server = HTTPServer(("127.0.0.1", 0), Registry)
    Registry.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class Clock:
    """Time that passes only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def adapter(clock: Clock, **options: Any) -> HttpRegistry:
    values: dict[str, Any] = {"attempts": 10, "backoff_s": 2.0} | options
    return HttpRegistry(None, sleep=clock.sleep, clock=clock, **values)  # type: ignore[arg-type]


def test_a_5xx_on_the_manifest_check_is_retried_until_it_answers(registry: str) -> None:
    Registry.plan = [503, 502, 200]
    clock = Clock()
    found = adapter(clock).manifest(f"{registry}/ml/pytorch:1")
    assert found is not None and found.digest == DIGEST and found.config == CONFIG
    assert clock.sleeps == [2.0, 4.0] and len(Registry.seen) == 3


def test_persistent_5xx_gives_up_at_the_deadline_and_says_how_long_it_tried(
    registry: str,
) -> None:
    Registry.plan = [503]
    clock = Clock()
    with pytest.raises(RegistryError) as caught:
        adapter(clock, deadline_s=20.0).manifest(f"{registry}/ml/pytorch:1")
    # 2 + 4 + 8 = 14 s of waiting; a 16 s wait would end past the 20 s budget.
    assert clock.sleeps == [2.0, 4.0, 8.0]
    assert "answered 503" in caught.value.message and "4 tries in 14s" in caught.value.message


def test_without_a_deadline_the_attempts_bound_the_retries(registry: str) -> None:
    Registry.plan = [503]
    clock = Clock()
    with pytest.raises(RegistryError):
        adapter(clock, attempts=3).manifest(f"{registry}/ml/pytorch:1")
    assert clock.sleeps == [2.0, 4.0] and len(Registry.seen) == 3


def test_a_registry_that_asks_for_credentials_says_so_and_is_not_retried(registry: str) -> None:
    Registry.plan = [401]
    clock = Clock()
    with pytest.raises(RegistryError) as caught:
        adapter(clock).manifest(f"{registry}/ml/pytorch:1")
    assert "asks for credentials" in caught.value.message
    assert caught.value.hint == f"log in first: docker login {registry}"
    assert clock.sleeps == []


def test_a_registry_that_is_down_is_named_with_how_to_fix_it_at_once() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    clock = Clock()
    with pytest.raises(RegistryError) as caught:
        adapter(clock).manifest(f"127.0.0.1:{port}/ml/pytorch:1")
    assert "cannot reach the registry" in caught.value.message
    assert "start the registry" in caught.value.hint and "--registry" in caught.value.hint
    assert clock.sleeps == []


def test_a_push_stops_retrying_when_the_deadline_would_pass() -> None:
    client = FakePushClient(
        [[{"errorDetail": {"message": "received unexpected HTTP status: 503"}}]]
    )
    clock = Clock()
    outcome = push(
        client.engine,
        "r.example/a/b:t",
        attempts=10,
        backoff_s=2.0,
        sleep=clock.sleep,
        deadline_s=10.0,
        clock=clock,
    )
    assert not outcome.ok and outcome.kind == "transient"
    assert clock.sleeps == [2.0, 4.0] and client.pushes == 3
    assert "publish deadline" in outcome.error


def test_backoff_doubles_and_respects_both_bounds() -> None:
    clock = Clock()
    backoff = Backoff(attempts=5, backoff_s=1.0, deadline_s=None, clock=clock)
    assert [backoff.delay_after(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, None]
    limited = Backoff(attempts=5, backoff_s=1.0, deadline_s=3.5, clock=clock)
    clock.now += 1.0
    assert limited.delay_after(1) == 1.0 and limited.delay_after(2) == 2.0
    assert limited.delay_after(3) is None  # 1 s gone + 4 s > 3.5 s


class StuckPush(FakePushResponse):
    """A push whose engine keeps retrying one layer and says nothing more until the client
    goes away (close)."""

    def __init__(self) -> None:
        super().__init__([])
        self.closed = threading.Event()

    def iter_lines(self) -> Iterator[bytes]:
        yield json.dumps({"status": "Pushed", "id": "aaaaaaaaaaaa"}).encode()
        yield json.dumps({"status": "Retrying in 5 seconds", "id": "bbbbbbbbbbbb"}).encode()
        self.closed.wait(30)
        raise requests.exceptions.ConnectionError("closed")

    def close(self) -> None:
        self.closed.set()


def test_a_push_still_running_at_the_deadline_is_cancelled_and_its_layer_named() -> None:
    response = StuckPush()
    client = FakePushClient([[]])
    client.post = lambda *args, **kwargs: response  # type: ignore[method-assign]
    started = time.monotonic()
    outcome = push(client.engine, "r.example/a/b:t", deadline_s=1.0)
    assert time.monotonic() - started < 10
    assert response.closed.is_set()  # the connection is closed: the engine cancels the push
    assert not outcome.ok and outcome.kind == "permanent" and outcome.attempts == 1
    assert outcome.error.startswith("deadline: the push of r.example/a/b:t was still running")
    assert "bbbbbbbbbbbb: Retrying in 5 seconds" in outcome.error
    assert "aaaaaaaaaaaa" not in outcome.error
