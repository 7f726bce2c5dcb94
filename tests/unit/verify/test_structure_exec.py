"""The structure checks' commands, when the engine (not the command) fails to run them."""

from __future__ import annotations

from typing import Any

import pytest
import testinfra
from testinfra.backend.base import CommandResult

from imagekit.adapters.structure import (
    ENGINE_FAILED,
    EXEC_TRIES,
    RUNTIME_FAILED,
    engine_checked,
)
from imagekit.errors import EngineError, ExitCode

RUNC = (
    "Error: runc: exec failed: unable to start container process: waiting for init preliminary "
    "setup: read init-p: connection reset by peer: OCI runtime error"
)
# Docker 26's answer to the same failure (ci-20), on stdout, exit 126.
DOCKER_RUNC = (
    "OCI runtime exec failed: exec failed: unable to start container process: waiting for init "
    "preliminary setup: read init-p: connection reset by peer: unknown\r\n"
)


def host_answering(*codes: int, plain_126: bool = False) -> tuple[Any, list[str]]:
    """A testinfra docker host whose `docker exec` exits with `codes` in turn (the last one
    from then on), and the commands it was asked to run. 125 says Podman's runc line on
    stderr, 126 Docker's on stdout (`plain_126`: a 126 of the command's own, silent)."""
    host = testinfra.get_host(f"docker://root@fake-{'-'.join(map(str, codes))}")
    backend = host.backend
    asked: list[str] = []
    left = list(codes)

    def run(command: str, *args: str, **kwargs: Any) -> CommandResult:
        asked.append(command % args if args else command)
        rc = left.pop(0) if len(left) > 1 else left[0]
        stderr = RUNC.encode() if rc == ENGINE_FAILED else b""
        stdout = DOCKER_RUNC.encode() if rc == RUNTIME_FAILED and not plain_126 else b""
        return CommandResult(backend, rc, command.encode(), stdout, stderr)

    backend.run = run
    backend.imagekit_checked = False
    return host, asked


def exists(host: Any, path: str) -> bool:
    """What testinfra's `host.file(path).exists` runs (without its uname first)."""
    return bool(host.run_test("test -e %s", path).rc == 0)


def test_an_exec_the_engine_failed_to_start_is_tried_again() -> None:
    host, asked = host_answering(ENGINE_FAILED, ENGINE_FAILED, 0)
    assert exists(engine_checked(host, pause_s=0), "/usr/sbin/sshd")
    assert asked == ["test -e /usr/sbin/sshd"] * 3


def test_the_commands_own_exit_codes_are_answers_not_engine_trouble() -> None:
    for code, there in ((1, False), (0, True)):
        host, asked = host_answering(code)
        assert exists(engine_checked(host, pause_s=0), "/usr/sbin/sshd") is there
        assert len(asked) == 1
    host, asked = host_answering(127)
    assert engine_checked(host, pause_s=0).run("gcc --version").rc == 127 and len(asked) == 1


def test_an_engine_that_keeps_failing_is_engine_trouble_with_its_own_line() -> None:
    host, asked = host_answering(ENGINE_FAILED)
    with pytest.raises(EngineError) as raised:
        exists(engine_checked(host, pause_s=0), "/usr/sbin/sshd")
    assert len(asked) == EXEC_TRIES
    assert raised.value.exit_code == ExitCode.ENGINE_UNAVAILABLE
    assert "runc: exec failed" in raised.value.message and "exit 125" in raised.value.message


def test_a_cached_host_is_wrapped_once() -> None:
    host, asked = host_answering(ENGINE_FAILED)
    engine_checked(engine_checked(host, pause_s=0), pause_s=0)
    with pytest.raises(EngineError):
        host.run("true")
    assert len(asked) == EXEC_TRIES  # not EXEC_TRIES squared


def test_dockers_runtime_failure_is_tried_again_and_a_plain_126_is_the_commands() -> None:
    host, asked = host_answering(RUNTIME_FAILED, 0)
    assert exists(engine_checked(host, pause_s=0), "/opt/venv/bin/jupyter")
    assert asked == ["test -e /opt/venv/bin/jupyter"] * 2
    host, asked = host_answering(RUNTIME_FAILED)
    with pytest.raises(EngineError) as raised:
        exists(engine_checked(host, pause_s=0), "/opt/venv/bin/jupyter")
    assert len(asked) == EXEC_TRIES and "exit 126): OCI runtime exec failed" in raised.value.message
    host, asked = host_answering(RUNTIME_FAILED, plain_126=True)
    assert engine_checked(host, pause_s=0).run("./not-executable").rc == 126 and len(asked) == 1
