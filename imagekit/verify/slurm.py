"""How verify runs its probes as Slurm jobs, decided here. Pure.

`imagekit verify --slurm` submits one batch job per image (`sbatch`), whose script runs the
same runner as in a container under the HPC runtime (`ch-run`, verify/runtimes.py) on the
compute node, on the image exported to a folder the nodes share. Its output files are read
back into the same records as a local verify. `--nodes N` is one more job of N nodes: `srun`
starts one torchrun per node, and the rendezvous is the job's first node, as Slurm names it.
A job is watched through `scontrol show job`; how it ended (`JobState`) is part of its result.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# The rendezvous port of a multi-node job on its first node (torchrun's default).
RENDEZVOUS_PORT = 29500
# What the job script sets for a multi-node run: the first node's name, for the endpoint.
HEAD = "IMAGEKIT_HEAD"
ENDPOINT_MARK = "@@endpoint@@"
# Seconds a job may run past the probes' own limit before Slurm ends it (its start, the
# runtime's, and `import torch`), rounded up to whole minutes for sbatch's --time.
SLURM_MARGIN_S = 120


class JobState(StrEnum):
    """The states `scontrol show job` reports that matter here (Slurm's names)."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    GONE = "GONE"  # Slurm no longer knows the job (it ended longer ago than MinJobAge)

    @property
    def ended(self) -> bool:
        """Whether the job is over (its output files are whole)."""
        return self not in (
            JobState.PENDING,
            JobState.CONFIGURING,
            JobState.RUNNING,
            JobState.COMPLETING,
        )


# What a person reads for a job that did not end by itself.
ENDINGS = {
    JobState.TIMEOUT: "Slurm ended it at its time limit",
    JobState.CANCELLED: "it was cancelled (scancel, or an administrator)",
    JobState.NODE_FAIL: "its node was lost",
    JobState.OUT_OF_MEMORY: "it ran out of memory",
    JobState.BOOT_FAIL: "its node failed to boot",
    JobState.DEADLINE: "it missed its deadline",
    JobState.PREEMPTED: "it was preempted",
    JobState.FAILED: "it failed",
}


@dataclass(frozen=True)
class SlurmAsk:
    """Where and how long the jobs may run (`verify --slurm`'s options)."""

    partition: str | None = None
    account: str | None = None
    time_limit_min: int | None = None  # default: the probes' own limit plus SLURM_MARGIN_S
    gpus_per_node: int = 0
    pending_limit_min: int | None = None  # a job still pending this long is cancelled

    def options_given(self) -> list[str]:
        """The names of verify's options this ask was given (a default is not given)."""
        named = {
            "--partition": self.partition,
            "--account": self.account,
            "--time-limit": self.time_limit_min,
            "--gpus-per-node": self.gpus_per_node or None,
            "--pending-limit": self.pending_limit_min,
        }
        return [name for name, value in named.items() if value is not None]

    @property
    def pending_limit_s(self) -> float | None:
        """How long a job may wait for its nodes, in seconds (None: as long as it takes)."""
        return None if self.pending_limit_min is None else 60.0 * self.pending_limit_min


@dataclass(frozen=True)
class Job:
    """What `scontrol show job` said of one job."""

    job_id: str
    state: JobState
    exit_code: int | None  # the batch script's (None: none, a signal, or not known)
    reason: str = ""

    @property
    def why_waiting(self) -> str:
        """Slurm's reason for the job's state ("Resources", "PartitionDown"), "" for none."""
        return "" if self.reason in ("", "None") else self.reason

    def note(self) -> str:
        """One line for the log of a job that did not end by itself; "" when it did. A job
        still `PENDING` here is one imagekit cancelled at --pending-limit."""
        reason = f" ({self.why_waiting})" if self.why_waiting else ""
        if self.state is JobState.PENDING:
            return (
                f"slurm: job {self.job_id} never started: it was still pending{reason} at "
                "--pending-limit, and imagekit cancelled it"
            )
        why = ENDINGS.get(self.state)
        if why is None or (self.state is JobState.FAILED and self.exit_code):
            return ""
        return f"slurm: job {self.job_id} ended {self.state}: {why}{reason}"

    def waiting_line(self, image: str) -> str:
        """What verify says when a job of `image` is, or stays, pending for a new reason."""
        reason = f": {self.why_waiting}" if self.why_waiting else ""
        named = image.removeprefix("sha256:")[:12] if image.startswith("sha256:") else image
        return f"slurm: job {self.job_id} of {named} is pending{reason}"


def parse_job(job_id: str, oneliner: str) -> Job:
    """`scontrol show job -o ID`'s line as a `Job`; a job Slurm no longer knows is `GONE`."""
    fields = dict(re.findall(r"(\w+)=(\S*)", oneliner))
    state_word = fields.get("JobState", "")
    if not state_word:
        return Job(job_id, JobState.GONE, None)
    try:
        state = JobState(state_word)
    except ValueError:
        state = JobState.FAILED
    code, _, signal = fields.get("ExitCode", "").partition(":")
    exit_code = int(code) if code.isdigit() and signal in ("", "0") else None
    return Job(job_id, state, exit_code, fields.get("Reason", ""))


def time_limit_min(ask: SlurmAsk, timeout_s: float) -> int:
    """sbatch's --time in minutes: as asked, else the probes' limit plus a margin."""
    if ask.time_limit_min is not None:
        return ask.time_limit_min
    return max(1, -(-int(timeout_s + SLURM_MARGIN_S) // 60))


def sbatch_command(
    ask: SlurmAsk, name: str, folder: Path, *, nodes: int, minutes: int
) -> list[str]:
    """The `sbatch` line of one job, its script `job.sh` in `folder`: its name, its output
    (`job.out`) and errors (`job.err`) there, nodes, one task per node, the time limit, and
    the partition, account and GPUs asked for."""
    command = [
        "sbatch", "--parsable", f"--job-name={name}", f"--output={folder / 'job.out'}",
        f"--error={folder / 'job.err'}", f"--nodes={nodes}", "--ntasks-per-node=1",
        f"--time={minutes}",
    ]  # fmt: skip
    if ask.partition:
        command.append(f"--partition={ask.partition}")
    if ask.account:
        command.append(f"--account={ask.account}")
    if ask.gpus_per_node:
        command.append(f"--gpus-per-node={ask.gpus_per_node}")
    return [*command, str(folder / "job.sh")]


def _line(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _exports(environment: Mapping[str, str]) -> str:
    """`export NAME=value` lines for a job script, one per variable."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in environment.items())


def batch_script(
    run: Sequence[str],
    environment: Mapping[str, str],
    *,
    inject: Sequence[str] = (),
) -> str:
    """The job script of one image: `inject` (ch-fromhost, on the compute node, whose driver
    is the one that counts), then `run` (ch-run and the runner) in the batch step."""
    exports = _exports(environment)
    lines = ["#!/bin/sh", "# Written by imagekit verify --slurm.", exports.rstrip("\n")]
    if inject:
        lines.append(_line(inject))
    lines.append(f"exec {_line(run)}")
    return "\n".join(line for line in lines if line) + "\n"


def nodes_script(
    run: Sequence[str], environment: Mapping[str, str], outputs: Path, *, nodes: int
) -> str:
    """The job script of a multi-node run: one task per node through `srun`, each a torchrun
    whose rendezvous endpoint (`ENDPOINT_MARK` in `run`) is the job's first node; node N's
    output goes to `outputs` + `N.out` and `N.err`."""
    exports = _exports(environment)
    command = _line(run).replace(shlex.quote(ENDPOINT_MARK), f'"${HEAD}:{RENDEZVOUS_PORT}"')
    return (
        "#!/bin/sh\n# Written by imagekit verify --slurm --nodes.\n"
        f"{exports}"
        f'{HEAD}=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"exec srun --nodes={nodes} --ntasks-per-node=1 "
        f"--output={shlex.quote(str(outputs))}.out --error={shlex.quote(str(outputs))}.err "
        f"{command}\n"
    )
