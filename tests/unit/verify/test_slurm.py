"""`verify --slurm` as plain values: the sbatch line, the job scripts, and how a job ended."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imagekit.errors import InputError
from imagekit.kernel.vocabulary import Runtime
from imagekit.verify.requests import VerifySettings
from imagekit.verify.slurm import (
    ENDPOINT_MARK,
    JobState,
    SlurmAsk,
    batch_script,
    nodes_script,
    parse_job,
    sbatch_command,
    time_limit_min,
)

LINE = (
    "JobId=7 JobName=imagekit-x UserId=ikc(1500) JobState={state} Reason={reason} "
    "Dependency=(null) ExitCode={code} RunTime=00:00:09 TimeLimit=00:02:00 NodeList=ikn1"
)


@pytest.mark.parametrize(
    ("state", "code", "ended", "exit_code"),
    [
        ("PENDING", "0:0", False, 0),
        ("RUNNING", "0:0", False, 0),
        ("COMPLETING", "0:0", False, 0),
        ("COMPLETED", "0:0", True, 0),
        ("FAILED", "5:0", True, 5),
        ("TIMEOUT", "0:15", True, None),
        ("NODE_FAIL", "0:0", True, 0),
        ("CANCELLED", "0:15", True, None),
    ],
)
def test_a_jobs_state_and_exit_code_are_read_from_scontrol(
    state: str, code: str, ended: bool, exit_code: int | None
) -> None:
    job = parse_job("7", LINE.format(state=state, reason="None", code=code))
    assert job.state is JobState(state) and job.state.ended is ended
    assert job.exit_code == exit_code


def test_a_job_slurm_forgot_has_ended_and_says_so() -> None:
    job = parse_job("7", "")
    assert job.state is JobState.GONE and job.state.ended


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("TIMEOUT", "ended TIMEOUT: Slurm ended it at its time limit"),
        ("NODE_FAIL", "ended NODE_FAIL: its node was lost (NodeDown)"),
        ("CANCELLED", "ended CANCELLED: it was cancelled"),
        ("OUT_OF_MEMORY", "ended OUT_OF_MEMORY: it ran out of memory"),
    ],
)
def test_a_job_that_did_not_end_by_itself_is_one_clear_line(state: str, said: str) -> None:
    reason = "NodeDown" if state == "NODE_FAIL" else "None"
    job = parse_job("7", LINE.format(state=state, reason=reason, code="0:9"))
    assert job.note().startswith("slurm: job 7 ") and said in job.note()


def test_a_job_that_ended_by_itself_adds_nothing() -> None:
    for state, code in (("COMPLETED", "0:0"), ("FAILED", "1:0")):
        assert parse_job("7", LINE.format(state=state, reason="None", code=code)).note() == ""


def test_the_time_limit_is_the_probes_own_plus_a_margin_unless_asked() -> None:
    assert time_limit_min(SlurmAsk(), 600) == 12  # 600 s + 120 s
    assert time_limit_min(SlurmAsk(), 1) == 3
    assert time_limit_min(SlurmAsk(time_limit_min=30), 600) == 30


def test_sbatch_asks_only_for_what_was_given() -> None:
    plain = sbatch_command(SlurmAsk(), "n", Path("/s"), nodes=1, minutes=5)
    assert plain == [
        "sbatch", "--parsable", "--job-name=n", "--output=/s/job.out", "--error=/s/job.err",
        "--nodes=1", "--ntasks-per-node=1", "--time=5", "/s/job.sh",
    ]  # fmt: skip
    ask = SlurmAsk(partition="gpu", account="ml", gpus_per_node=4)
    asked = sbatch_command(ask, "n", Path("/s"), nodes=2, minutes=5)
    assert {"--partition=gpu", "--account=ml", "--gpus-per-node=4", "--nodes=2"} <= set(asked)


def test_the_batch_script_runs_the_command_as_given(tmp_path: Path) -> None:
    script = batch_script(["printf", "%s|", "a b", "$HOME"], {"X": "it's"}, inject=["true"])
    (tmp_path / "job.sh").write_text(script)
    done = subprocess.run(["sh", str(tmp_path / "job.sh")], capture_output=True, text=True)
    assert done.stdout == "a b|$HOME|", script


def test_the_nodes_script_meets_at_the_jobs_first_node(tmp_path: Path) -> None:
    script = nodes_script(
        ["torchrun", "--rdzv-endpoint", ENDPOINT_MARK], {}, tmp_path / "node%n", nodes=2
    )
    assert '--rdzv-endpoint "$IMAGEKIT_HEAD:29500"' in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in script
    assert f"--output={tmp_path}/node%n.out" in script and "--nodes=2" in script


def test_slurm_options_go_with_slurm_and_slurm_with_an_hpc_runtime() -> None:
    with pytest.raises(InputError, match="--partition go with --slurm"):
        VerifySettings(partition="gpu")
    with pytest.raises(InputError, match="under an HPC runtime") as docker:
        VerifySettings(slurm=True)
    assert docker.value.hint == "add --runtime charliecloud"
    with pytest.raises(InputError, match="on Slurm's nodes") as local:
        VerifySettings(runtime=Runtime.CHARLIECLOUD, nodes=2)
    assert local.value.hint is not None and "add --slurm" in local.value.hint
    asked = VerifySettings(slurm=True, runtime=Runtime.CHARLIECLOUD, nodes=2, partition="p")
    assert asked.slurm_ask == SlurmAsk(partition="p")


def test_pending_limit_goes_with_slurm_and_is_kept_in_minutes_and_seconds() -> None:
    with pytest.raises(InputError, match="--pending-limit go with --slurm"):
        VerifySettings(pending_limit_min=5)
    asked = VerifySettings(slurm=True, runtime=Runtime.CHARLIECLOUD, pending_limit_min=5)
    assert asked.slurm_ask == SlurmAsk(pending_limit_min=5)
    assert asked.slurm_ask.pending_limit_s == 300.0 and SlurmAsk().pending_limit_s is None
    given = SlurmAsk("p", "a", 3, 1, 5).options_given()
    assert given == ["--partition", "--account", "--time-limit", "--gpus-per-node",
                     "--pending-limit"]  # fmt: skip
    assert SlurmAsk().options_given() == []


def test_a_job_cancelled_while_pending_says_it_never_started_and_why() -> None:
    job = parse_job("7", LINE.format(state="PENDING", reason="PartitionDown", code="0:0"))
    assert job.note() == (
        "slurm: job 7 never started: it was still pending (PartitionDown) at --pending-limit, "
        "and imagekit cancelled it"
    )
    assert (
        job.waiting_line("sha256:" + "ab" * 32)
        == "slurm: job 7 of abababababab is pending: PartitionDown"
    )
    quiet = parse_job("7", LINE.format(state="PENDING", reason="None", code="0:0"))
    assert quiet.waiting_line("me/img:1") == "slurm: job 7 of me/img:1 is pending"
    assert "still pending at --pending-limit" in quiet.note()
