"""The engine adapter without an engine: a missing engine is a hint, not a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests.exceptions
import typer
import urllib3.exceptions

from imagekit.adapters.containers import ran_over
from imagekit.adapters.engine import connect, engine_errors
from imagekit.adapters.engine_facts import image_from_inspect
from imagekit.cli.common import guard
from imagekit.errors import EngineUnavailableError, ExitCode
from imagekit.kernel.engine import LocalImage

# `docker image inspect imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim`, trimmed.
INSPECT: dict[str, Any] = {
    "Id": "sha256:6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3",
    "RepoTags": [
        "imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim",
        "imagekit-demo/pytorch:latest-slim",
    ],
    "RepoDigests": [],
    "Parent": "",
    "Created": "2025-11-30T01:02:03.123456789Z",
    "Architecture": "amd64",
    "Os": "linux",
    "Size": 1_234_567_890,
    "Config": {
        "Env": ["PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"],
        "Cmd": ["python3"],
        "Labels": {
            "io.imagekit.flavour": "slim",
            "io.imagekit.input-hash": "sha256:" + "0" * 64,
            "io.imagekit.managed": "true",
        },
    },
    "RootFS": {
        "Type": "layers",
        "Layers": ["sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64],
    },
    "Metadata": {"LastTagTime": "2025-11-30T01:05:00Z"},
}


def test_connect_to_a_missing_socket_names_docker_host_and_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"unix://{tmp_path / 'docker.sock'}"
    monkeypatch.setenv("DOCKER_HOST", host)
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(EngineUnavailableError) as caught:
        connect(timeout_s=5)

    error = caught.value
    assert host in error.message
    assert "while connecting" in error.message
    assert "make engine" in error.hint
    assert error.exit_code is ExitCode.ENGINE_UNAVAILABLE
    assert "\n" not in error.message  # one line, no traceback text


def test_local_image_from_a_recorded_inspect() -> None:
    image = image_from_inspect(INSPECT)

    assert image == LocalImage(
        id=INSPECT["Id"],
        tags=(
            "imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim",
            "imagekit-demo/pytorch:latest-slim",
        ),
        labels=INSPECT["Config"]["Labels"],
        size_bytes=1_234_567_890,
        layers=("sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64),
        created="2025-11-30T01:02:03.123456789Z",
        env={"PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"},
        platform="linux/amd64",
    )


@pytest.mark.parametrize(
    "attrs",
    [
        {"Id": "sha256:abc"},
        {"Id": "sha256:abc", "RepoTags": None, "Config": None, "Size": None, "RootFS": None},
        {"Id": "sha256:abc", "Config": {"Labels": None}, "RootFS": {"Layers": None}},
    ],
    ids=["missing", "null", "null-inside"],
)
def test_local_image_of_a_dangling_image_with_nothing_set(attrs: dict[str, Any]) -> None:
    image = image_from_inspect(attrs)

    assert (image.id, image.tags, image.labels, image.size_bytes, image.layers) == (
        "sha256:abc",
        (),
        {},
        0,
        (),
    )


def test_an_engine_that_accepts_and_never_answers_is_a_timeout_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import threading
    import time

    from imagekit.adapters import engine

    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    accepted: list[socket.socket] = []
    threading.Thread(
        target=lambda: accepted.extend(server.accept()[0] for _ in range(4)), daemon=True
    ).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setattr(engine, "PING_TIMEOUT_S", 1)
    started = time.monotonic()
    try:
        with pytest.raises(EngineUnavailableError) as caught:
            engine.connect()
    finally:
        server.close()
    assert time.monotonic() - started < 30
    assert caught.value.exit_code == ExitCode.ENGINE_UNAVAILABLE
    assert "did not answer in time" in caught.value.message


@pytest.mark.parametrize(
    ("said", "hint"),
    [
        (
            "container-init binary not found on the host: stat /usr/libexec/podman/catatonit",
            "catatonit",
        ),
        ("error setting rlimit type 7: operation not permitted", "default_ulimits"),
        (
            "crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2: "
            "OCI runtime error",
            'runtime = "runc"',
        ),
        (
            "netavark: nftables error: unable to execute nft: No such file or directory (os "
            "error 2)",
            "install nftables",
        ),
        ('Get "https://127.0.0.1:5000/v2/": server gave HTTP response to HTTPS client', "insecure"),
        ("some refusal nobody has seen", "see the engine's log"),
    ],
)
def test_an_api_error_is_one_line_with_exit_3_and_a_hint_for_what_engines_lack(
    said: str, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker.errors
    import requests

    from imagekit.adapters.engine import engine_errors
    from imagekit.errors import EngineError

    monkeypatch.setenv("DOCKER_HOST", "unix:///run/podman/podman.sock")
    response = requests.Response()
    response.status_code = 500
    with pytest.raises(EngineError) as caught, engine_errors("creating a probe container"):
        raise docker.errors.APIError("500 Server Error", response, explanation=said + "\nmore")
    error = caught.value
    assert error.exit_code is ExitCode.ENGINE_UNAVAILABLE and "\n" not in error.message
    assert error.message.startswith(
        "the engine at unix:///run/podman/podman.sock refused while creating a probe container"
    )
    assert hint in error.hint


@pytest.mark.parametrize(
    "raised",
    [
        requests.exceptions.ChunkedEncodingError("Response ended prematurely"),
        urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(0 bytes read)"),
    ],
)
def test_an_engine_that_stops_in_the_middle_of_an_answer_is_engine_trouble(
    raised: Exception,
) -> None:
    with pytest.raises(EngineUnavailableError) as caught, engine_errors("building x"):
        raise raised
    assert caught.value.exit_code == ExitCode.ENGINE_UNAVAILABLE
    assert "stopped in the middle of building x" in caught.value.message
    assert "removed by the next imagekit run" in caught.value.hint


def test_an_engine_error_that_escaped_the_adapters_exits_3_not_as_bad_input() -> None:
    # requests' errors are OSErrors: they once came out as "cannot use: ..." with exit 2.
    with pytest.raises(typer.Exit) as caught, guard():
        raise requests.exceptions.ChunkedEncodingError("Response ended prematurely")
    assert caught.value.exit_code == ExitCode.ENGINE_UNAVAILABLE


def test_a_results_folder_problem_is_still_bad_input() -> None:
    with pytest.raises(typer.Exit) as caught, guard():
        raise PermissionError(13, "Permission denied", "/results")
    assert caught.value.exit_code == ExitCode.BAD_INPUT


@pytest.mark.parametrize(
    "exc,expected",
    [
        (requests.exceptions.ReadTimeout("read timed out"), True),
        (
            requests.exceptions.ConnectionError(
                urllib3.exceptions.ReadTimeoutError(None, "/wait", "Read timed out.")  # type: ignore[arg-type]
            ),
            True,
        ),
        (requests.exceptions.ConnectionError("Connection aborted: FileNotFoundError"), False),
    ],
)
def test_a_failed_wait_is_running_over_only_when_the_client_timed_out(
    exc: Exception, expected: bool
) -> None:
    assert ran_over(exc) is expected
