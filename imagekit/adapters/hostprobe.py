"""Adapter: run the probes in this Python environment (host mode), no Docker at all.

The same probe files and the same runner as in containers, started with the
current interpreter: a doctor for bare-metal GPU nodes, and how the probes run
on a GPU machine that has no Docker. Imports neither docker nor jinja2.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imagekit.adapters.node_wait import wait_for_nodes
from imagekit.verify.ports import NodesRequest, NodesRun, ProbeRequest, ProbeRun
from imagekit.verify.probe_nodes import NodeOutput, all_ranks_reported, nodes_command
from imagekit.verify.probes import runner_command


class HostProbeRunner:
    """The `ProbeRunner` port in this Python environment (`python`: another interpreter)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def run(self, request: ProbeRequest) -> ProbeRun:
        """Run the request's probes here; `image`, `gpus`, `shm_bytes` and `labels` belong to
        containers and are not used."""
        nonce = secrets.token_hex(16)
        with tempfile.TemporaryDirectory(prefix="imagekit-nonce-") as private:
            nonce_file = Path(private) / "nonce"  # the folder is 0700: this user's alone
            nonce_file.write_text(nonce, encoding="utf-8")
            command = runner_command(
                self.python,
                str(request.probes_dir),
                list(request.probes),
                request.expected,
                request.device,
                str(nonce_file),
            )
            started = time.monotonic()
            stdout, stderr, exit_code, timed_out = run_bounded(command, request.timeout_s)
        wall_s = time.monotonic() - started
        return ProbeRun.of(
            request,
            stdout,
            stderr,
            exit_code=exit_code,
            timed_out=timed_out,
            nonce=nonce,
            wall_s=wall_s,
        )

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """Each node a torchrun of its own on this machine, meeting on loopback: the same
        probe and rendezvous a cluster uses, without containers."""
        nonce = secrets.token_hex(16)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = nodes_command(
            self.python,
            str(request.probes_dir),
            request.probe,
            nodes=request.nodes,
            nproc=request.nproc,
            endpoint=f"127.0.0.1:{port}",
            run_id=f"imagekit-{nonce[:8]}",
            device=request.device,
            init_timeout_s=request.init_timeout_s,
        )
        env = {**os.environ, "IMAGEKIT_PROBE_NONCE": nonce}
        started = time.monotonic()
        outputs = _nodes_here(command, env, request, nonce)
        return NodesRun(tuple(outputs), nonce, time.monotonic() - started)


def _nodes_here(
    command: list[str], env: dict[str, str], request: NodesRequest, nonce: str
) -> list[NodeOutput]:
    """Start `request.nodes` processes of `command` and wait for them (`wait_for_nodes`, with
    what each has printed so far); those still running at the end are killed, and said to have
    run over."""
    # Output to files, not pipes: the nodes are polled, not read, while they run, and a
    # node that fills a pipe (NCCL_DEBUG=INFO) would block on it.
    with (
        tempfile.TemporaryDirectory(prefix="imagekit-nodes-") as folder,
        contextlib.ExitStack() as files,
    ):
        logs = [
            tuple(files.enter_context(Path(folder, f"node{n}.{s}").open("w+")) for s in "oe")
            for n in range(request.nodes)
        ]
        processes: list[subprocess.Popen[str]] = []
        try:
            for stdout, stderr in logs:
                processes.append(
                    subprocess.Popen(
                        command,
                        stdout=stdout,
                        stderr=stderr,
                        text=True,
                        env=env,
                        start_new_session=True,
                    )
                )
            codes = wait_for_nodes(
                [process.poll for process in processes],
                lambda node: all_ranks_reported(
                    Path(folder, f"node{node}.o").read_text(errors="replace"), nonce, request.nproc
                ),
                timeout_s=request.timeout_s,
                linger_s=request.linger_s,
            )
        finally:
            for process in processes:
                if process.poll() is None:
                    _kill_group(process)
        outputs = []
        for node, (process, (stdout, stderr)) in enumerate(zip(processes, logs, strict=True)):
            stdout.seek(0)
            stderr.seek(0)
            outputs.append(
                NodeOutput(
                    node,
                    stdout.read(),
                    stderr.read(),
                    process.returncode,
                    timed_out=codes[node] is None,
                )
            )
    return outputs


def run_bounded(
    command: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> tuple[str, str, int | None, bool]:
    """stdout, stderr, exit code and whether it ran over; the whole process group is killed
    when it runs over or this is interrupted. `env`: the process's environment (default:
    this one's)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # so a timeout can take the DDP ranks down with it
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return stdout, stderr, process.returncode, False
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        return stdout, stderr, process.returncode, True
    except BaseException:
        _kill_group(process)
        raise


def _kill_group(process: subprocess.Popen[str]) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
