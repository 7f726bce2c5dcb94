"""Adapter: run the probes in this Python environment (host mode), no Docker at all.

The same probe files and the same runner as in containers, started with the
current interpreter: a doctor for bare-metal GPU nodes, and how the probes run
on a GPU machine that has no Docker. Imports neither docker nor jinja2.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from imagekit.probes import RunnerOutput, parse_events, runner_command


def run_host(
    probes_dir: Path,
    probes: list[str],
    expected: dict[str, object],
    *,
    device: str,
    timeout_s: float,
    python: str | None = None,
) -> tuple[RunnerOutput, float]:
    """Run `probes` with `python` (default: this interpreter); results and wall seconds."""
    command = runner_command(
        python or sys.executable, str(probes_dir), probes, dict(expected), device
    )
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a timeout can take the DDP ranks down with it
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process)
        stdout, stderr = process.communicate()
    except BaseException:
        _kill_group(process)
        raise
    output = parse_events(
        stdout, probes, timed_out=timed_out, exit_code=process.returncode, stderr=stderr
    )
    return output, time.monotonic() - started


def _kill_group(process: subprocess.Popen[str]) -> None:
    import os
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
