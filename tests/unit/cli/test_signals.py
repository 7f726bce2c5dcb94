"""Stop signals end a command as Ctrl-C does, with the shell's exit status for that signal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.children import default_stop_signals

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "sig,code,name",
    [
        (signal.SIGINT, 130, "SIGINT"),
        (signal.SIGTERM, 143, "SIGTERM"),
        (signal.SIGHUP, 129, "SIGHUP"),
    ],
)
def test_a_stop_signal_while_waiting_on_the_engine_ends_with_its_exit_status(
    tmp_path: Path, sig: int, code: int, name: str
) -> None:
    # An engine that accepts the connection and never answers keeps imagekit waiting.
    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    accepted: list[socket.socket] = []
    threading.Thread(
        target=lambda: accepted.extend(server.accept()[0] for _ in range(4)), daemon=True
    ).start()
    process = subprocess.Popen(
        [sys.executable, "-m", "imagekit", "gc", "--dry-run"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DOCKER_HOST": f"unix://{path}"},
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 30
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted, "imagekit never reached the engine"
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        server.close()
    assert process.returncode == code, stderr
    assert f"interrupted ({name})" in stderr and "Traceback" not in stderr


def test_a_signal_the_process_started_with_ignored_stays_ignored() -> None:
    code = (
        "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
        "from imagekit.cli.signals import install; install(); "
        "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, "
        "signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["True", "True"]


def test_after_the_first_signal_the_others_are_ignored_until_cleanup_ends() -> None:
    from imagekit.cli import signals

    saved = {s: signal.getsignal(s) for s in signals.HANDLED}
    try:
        with pytest.raises(signals.Stopped) as caught:
            signals._stop(signal.SIGTERM, None)
        assert caught.value.exit_code == 143
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in signals.HANDLED)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_a_closed_terminal_does_not_change_the_exit_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After SIGHUP from a closed terminal, writing the "interrupted" line fails with EIO.
    import typer

    from imagekit.cli import common
    from imagekit.cli.signals import Stopped

    def gone(message: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(common, "say", gone)
    with pytest.raises(typer.Exit) as caught, common.guard():
        raise Stopped(signal.SIGHUP)
    assert caught.value.exit_code == 129
