"""How verify --slurm waits for a job (adapters/slurm.py `_wait` and `_job`), against stand-in
`sbatch`, `scontrol` and `scancel` programs on PATH that play a job's states from a file and
write down each call: a pending job's reasons are said once each, a job still pending at the
limit is cancelled, and a job that starts before it runs to its end."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.adapters import slurm
from imagekit.verify.slurm import JobState, SlurmAsk

LINE = "JobId=42 JobState={} Reason={} ExitCode=0:0 TimeLimit=00:05:00"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of stand-ins: `states` holds one `STATE REASON` line per poll (the last one
    stays), `calls` what each program was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    programs = {
        "sbatch": 'echo "sbatch $*" >> "$HERE/calls"; echo "42;imagekit"',
        "scancel": 'echo "scancel $*" >> "$HERE/calls"',
        # Each call takes the next line of `states`; the last is kept once the rest are used.
        "scontrol": (
            'echo "scontrol $*" >> "$HERE/calls"\n'
            'line=$(head -n 1 "$HERE/states")\n'
            '[ "$(wc -l < "$HERE/states")" -gt 1 ] && sed -i 1d "$HERE/states"\n'
            f'set -- $line; printf "{LINE}\\n" "$1" "$2"'.replace("{}", "%s")
        ),
    }
    for name, body in programs.items():
        program = bin_dir / name
        program.write_text(f"#!/bin/sh\nHERE={tmp_path}\n{body}\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "POLL_S", 0.05)
    yield tmp_path


def calls(folder: Path, program: str) -> list[str]:
    path = folder / "calls"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.startswith(program)]


def test_a_job_still_pending_at_the_limit_is_cancelled_and_each_reason_said_once(
    cluster: Path,
) -> None:
    (cluster / "states").write_text("PENDING None\nPENDING Priority\nPENDING Priority\n"
                                    "PENDING PartitionDown\n")  # fmt: skip
    said: list[str] = []
    job = slurm._wait("42", 0.5, lambda j: said.append(j.waiting_line("me/img:1")))
    assert job.state is JobState.PENDING and job.reason == "PartitionDown"
    assert said == [  # Reason=None: Slurm has not looked at the job yet, nothing to say
        "slurm: job 42 of me/img:1 is pending: Priority",
        "slurm: job 42 of me/img:1 is pending: PartitionDown",
    ]


def test_without_a_limit_a_pending_job_is_waited_for_until_it_ends(cluster: Path) -> None:
    (cluster / "states").write_text("PENDING Resources\n" * 12 + "RUNNING None\nCOMPLETED None\n")
    job = slurm._wait("42", None, lambda j: None)
    assert job.state is JobState.COMPLETED
    assert len(calls(cluster, "scontrol")) == 14


def test_the_runner_cancels_the_job_it_gave_up_on_and_only_that(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A minute is long for a unit test: the ask's limit is read as 0.3 s.
    monkeypatch.setattr(SlurmAsk, "pending_limit_s", property(lambda self: 0.3))
    (cluster / "states").write_text("PENDING PartitionDown\n")
    said: list[str] = []
    ask = SlurmAsk(pending_limit_min=1)
    runner = slurm.SlurmRunner(None, tmp_path / "shared", ask, said.append)  # type: ignore[arg-type]
    folder = tmp_path / "job"
    folder.mkdir()
    job, _ = runner._job(folder, "#!/bin/sh\n", "me/img:1", nodes=1, minutes=5)
    assert job.state is JobState.PENDING
    assert calls(cluster, "scancel") == ["scancel 42"]
    assert said == ["slurm: job 42 of me/img:1 is pending: PartitionDown"]
    (cluster / "calls").unlink()
    (cluster / "states").write_text("PENDING Resources\nRUNNING None\nCOMPLETED None\n")
    job, _ = runner._job(folder, "#!/bin/sh\n", "me/img:1", nodes=1, minutes=5)
    assert job.state is JobState.COMPLETED and calls(cluster, "scancel") == []
