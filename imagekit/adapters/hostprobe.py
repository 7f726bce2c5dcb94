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

from imagekit.core.ports import ProbeRequest, ProbeRun
from imagekit.core.probes import parse_events, runner_command


class HostProbeRunner:
    """The `ProbeRunner` port in this Python environment (`python`: another interpreter)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def run(self, request: ProbeRequest) -> ProbeRun:
        """Run the request's probes here; `image`, `gpus`, `shm_bytes` and `labels` belong to
        containers and are not used."""
        command = runner_command(
            self.python,
            str(request.probes_dir),
            list(request.probes),
            dict(request.expected),
            request.device,
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
            stdout, stderr = process.communicate(timeout=request.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
            stdout, stderr = process.communicate()
        except BaseException:
            _kill_group(process)
            raise
        output = parse_events(
            stdout,
            list(request.probes),
            timed_out=timed_out,
            exit_code=process.returncode,
            stderr=stderr,
        )
        wall_s = time.monotonic() - started
        return ProbeRun(output, stdout + stderr, process.returncode, timed_out, wall_s)


def _kill_group(process: subprocess.Popen[str]) -> None:
    import os
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
