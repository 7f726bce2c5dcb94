"""Adapter: the probes as Slurm jobs (`sbatch`, `scontrol`, `scancel`), under ch-run on the
compute nodes, on the image exported to a folder the nodes share (verify/slurm.py decides the
scripts and reads the job's state).

Each image is one batch job; `--nodes N` is one more job of N nodes. The submitting process
watches its job until it ends, and cancels it when it is interrupted (Ctrl-C, SIGTERM), so
no job outlives the verify. The export and the job's files are removed when the image is done.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.export import export_image, remove
from imagekit.adapters.probe_folder import NONCE_NAME, probe_folder
from imagekit.errors import EngineUnavailableError, InputError
from imagekit.hpc.export import ExportFormat
from imagekit.verify.ports import NodesRequest, NodesRun, ProbeRequest, ProbeRun
from imagekit.verify.probe_nodes import NodeOutput, nodes_command
from imagekit.verify.probes import runner_command
from imagekit.verify.runtimes import PROBES_AT, ch_run_command, runtime_environment
from imagekit.verify.slurm import (
    ENDPOINT_MARK,
    Job,
    JobState,
    SlurmAsk,
    batch_script,
    nodes_script,
    parse_job,
    sbatch_command,
    time_limit_min,
)

POLL_S = 1.0
CLIENTS = ("sbatch", "scontrol", "scancel")
# What scontrol says of a job that ended longer ago than the cluster's MinJobAge.
FORGOTTEN = "Invalid job id specified"


def require_slurm() -> None:
    """EngineUnavailableError (exit 3) where Slurm's commands are not here (not a login node)."""
    if missing := [c for c in CLIENTS if shutil.which(c) is None]:
        raise EngineUnavailableError(
            f"--slurm needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            "not on PATH",
            "run on a login node of the cluster, or install slurm-client (Debian/Ubuntu) "
            "with the cluster's slurm.conf",
        )


class SlurmRunner:
    """The `ProbeRunner` port as Slurm jobs; `shared`: a folder every node sees, where each
    image is exported while its job runs."""

    def __init__(
        self, engine: DockerEngine, shared: Path, ask: SlurmAsk, say: Callable[[str], None]
    ) -> None:
        self.engine = engine
        self.shared = shared
        self.ask = ask
        self.say = say  # a line for the person waiting: a job's reason to pend
        # The image exported last, kept for its multi-node job: (image id, its root).
        self.exported: tuple[str, Path] | None = None

    def image_dir(self, image: str) -> Path:
        """`image` exported under the shared folder, once for its jobs (the one before goes)."""
        if self.exported is not None:
            if self.exported[0] == image:
                return self.exported[1]
            self.close()
        folder = self._folder(image)
        self.exported = (image, folder / "image")
        export_image(self.engine, image, folder / "image", ExportFormat.DIR)
        return folder / "image"

    def close(self) -> None:
        """Remove the export this runner holds."""
        if self.exported is not None:
            remove(self.exported[1].parent)
            self.exported = None

    def run(self, request: ProbeRequest) -> ProbeRun:
        """One batch job of the request's probes under ch-run on a compute node."""
        nonce = secrets.token_hex(16)
        folder = self._folder(request.image)
        try:
            started = time.monotonic()
            image_dir = self.image_dir(request.image)
            probes = probe_folder(folder / "probes", request.probes_dir, nonce)
            runner = runner_command(
                "python3", PROBES_AT, list(request.probes), request.expected, request.device,
                f"{PROBES_AT}/{NONCE_NAME}",
            )  # fmt: skip
            inject = ["ch-fromhost", "--nvidia", str(image_dir)] if request.gpus else []
            script = batch_script(
                ch_run_command(image_dir, probes, runner), request.environment, inject=inject
            )
            start_s = time.monotonic() - started
            minutes = time_limit_min(self.ask, request.timeout_s)
            job, wall_s = self._job(folder, script, request.image, nodes=1, minutes=minutes)
            stdout = _read(folder / "job.out")
            stderr = _read(folder / "job.err") + "".join(f"{n}\n" for n in (job.note(),) if n)
        finally:
            remove(folder)
        return ProbeRun.of(
            request, stdout, stderr,
            exit_code=job.exit_code, timed_out=job.state is JobState.TIMEOUT, nonce=nonce,
            wall_s=wall_s, start_s=start_s,
        )  # fmt: skip

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """One job of `request.nodes` nodes: a torchrun per node under ch-run, meeting at the
        job's first node."""
        nonce = secrets.token_hex(16)
        folder = self._folder(request.image)
        try:
            image_dir = self.image_dir(request.image)
            probes = probe_folder(folder / "probes", request.probes_dir, "")
            torchrun = nodes_command(
                "python3", PROBES_AT, request.probe, nodes=request.nodes, nproc=request.nproc,
                endpoint=ENDPOINT_MARK, run_id=f"imagekit-{nonce[:8]}", device=request.device,
                init_timeout_s=request.init_timeout_s,
            )  # fmt: skip
            environment = {**request.environment, "IMAGEKIT_PROBE_NONCE": nonce}
            script = nodes_script(
                ch_run_command(image_dir, probes, torchrun),
                environment,
                folder / "node%n",
                nodes=request.nodes,
            )
            minutes = time_limit_min(self.ask, request.timeout_s)
            job, wall_s = self._job(
                folder, script, request.image, nodes=request.nodes, minutes=minutes
            )
            # The batch step's own output (srun's complaints) and how the job ended go with the
            # first node's.
            said = _read(folder / "job.err") + "".join(f"{n}\n" for n in (job.note(),) if n)
            outputs = tuple(
                NodeOutput(
                    node,
                    _read(folder / f"node{node}.out"),
                    _read(folder / f"node{node}.err") + (said if node == 0 else ""),
                    job.exit_code,
                    timed_out=job.state is JobState.TIMEOUT,
                )
                for node in range(request.nodes)
            )
        finally:
            remove(folder)
        return NodesRun(outputs, nonce, wall_s)

    # Jobs ------------------------------------------------------------------------------

    def _folder(self, image: str) -> Path:
        """A folder of this user's alone on the shared filesystem, for one image's job."""
        self.shared.mkdir(parents=True, exist_ok=True)
        folder = self.shared / f"{image.removeprefix('sha256:')[:12]}-{secrets.token_hex(3)}"
        folder.mkdir(mode=0o700)
        return folder

    def _job(
        self, folder: Path, script: str, image: str, *, nodes: int, minutes: int
    ) -> tuple[Job, float]:
        """Submit `script` and wait for its job to end; cancel it when interrupted, or when it
        is still pending at the --pending-limit (the job then comes back `PENDING`). The job
        gets the submitter's environment (sbatch passes it on), less imagekit's Python."""
        (folder / "job.sh").write_text(script, encoding="utf-8")
        name = f"imagekit-{folder.name}"
        command = sbatch_command(self.ask, name, folder, nodes=nodes, minutes=minutes)
        env = runtime_environment(os.environ, getpass.getuser())
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise InputError(f"sbatch refused the job: {said}", "check --partition, --account")
        job_id = done.stdout.strip().split(";")[0]
        started = time.monotonic()
        try:
            job = _wait(job_id, self.ask.pending_limit_s, lambda j: self.say(j.waiting_line(image)))
        except BaseException:
            _cancel(job_id)
            raise
        if job.state is JobState.PENDING:
            _cancel(job_id)
        return job, time.monotonic() - started


def _cancel(job_id: str) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["scancel", job_id], capture_output=True, check=False, timeout=30)


def _wait(job_id: str, pending_limit_s: float | None, pending: Callable[[Job], None]) -> Job:
    """Poll `scontrol show job` until the job has ended, or Slurm no longer knows it, or it
    is still pending after `pending_limit_s` (then it is returned `PENDING`). A controller
    that does not answer for a while (a restart, a network flake) is asked again: the job runs
    on without it. `pending(job)` hears of each new reason Slurm gives for the wait."""
    submitted, reason = time.monotonic(), None
    while True:
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False
        )
        if shown.returncode == 0 or FORGOTTEN in shown.stderr:
            job = parse_job(job_id, shown.stdout if shown.returncode == 0 else "")
            if job.state.ended:
                return job
            if job.state is JobState.PENDING:
                if job.why_waiting and job.why_waiting != reason:  # "None": not yet looked at
                    reason = job.why_waiting
                    pending(job)
                waited = time.monotonic() - submitted
                if pending_limit_s is not None and waited >= pending_limit_s:
                    return job
        time.sleep(POLL_S)


def _read(path: Path) -> str:
    """A job's output file, or "" where the job never wrote it."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
