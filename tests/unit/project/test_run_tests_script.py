"""scripts/run-tests.sh, the runner of `make test`, with stand-ins for pytest and the sweep:
both of its sessions must start able to take Ctrl-C (a background job of a script starts with
SIGINT ignored, and a Python started so installs no KeyboardInterrupt handler)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Stands in for the venv's python: the sweep (which would ask the engine) does nothing.
PYTHON = f"""#!/bin/sh
[ "$1" = "-m" ] && [ "$2" = "tests.integration.runs" ] && exit 0
exec {sys.executable} "$@"
"""
# Stands in for pytest: writes the SIGINT disposition it started with, named by its -m.
PYTEST = f"""#!{sys.executable}
import pathlib, signal, sys
marker = sys.argv[sys.argv.index("-m") + 1]
kind = "engines" if marker.startswith("contract") else "main"
handler = signal.getsignal(signal.SIGINT)
name = {{signal.SIG_IGN: "ignored", signal.SIG_DFL: "default"}}.get(handler, "handler")
(pathlib.Path(sys.argv[0]).parent / kind).write_text(name)
"""


def test_both_sessions_start_with_a_sigint_handler(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", PYTHON), ("pytest", PYTEST)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run-tests.sh")],
        cwd=work,
        env={**os.environ, "PYTEST": str(bin_dir / "pytest")},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Python's own KeyboardInterrupt handler in both: Ctrl-C ends either session.
    assert (bin_dir / "main").read_text() == "handler"
    assert (bin_dir / "engines").read_text() == "handler"
    # Each session leaves a JUnit file among the test artifacts (here: where it would go).
    assert (work / "results" / "test-artifacts").is_dir()
