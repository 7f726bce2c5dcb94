"""Which containers of ended runs the next run removes (imagekit/adapters/orphans.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from imagekit.adapters.orphans import (
    Orphan,
    is_failed_build_step,
    owner,
    owner_gone,
    removed_line,
)
from imagekit.kernel import labels as L


def fake_proc(tmp_path: Path, pid: int, ticks: str, name: str = "python3") -> Path:
    """A /proc with one process whose start time is `ticks`."""
    folder = tmp_path / "proc" / str(pid)
    folder.mkdir(parents=True)
    fields = ["S", *["0"] * 18, ticks, "0"]  # fields 3..22 (22: starttime)
    (folder / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    return tmp_path / "proc"


def test_the_owner_is_this_host_this_pid_and_its_start_time() -> None:
    host, pid, ticks = owner().split("/")
    assert host == socket.gethostname() and int(pid) == os.getpid() and ticks.isdigit()
    assert not owner_gone(owner())


def test_a_process_of_this_machine_that_is_gone_or_was_replaced_owns_nothing(
    tmp_path: Path,
) -> None:
    proc = fake_proc(tmp_path, 4242, "9000", name="a (strange) name")
    assert not owner_gone("h/4242/9000", host="h", proc=proc)
    assert owner_gone("h/4242/8999", host="h", proc=proc)  # the pid was handed out again
    assert owner_gone("h/4343/9000", host="h", proc=proc)  # no such process


@pytest.mark.parametrize("value", ["other/1/1", "h/x/1", "", "h/1"])
def test_owners_on_other_machines_or_in_other_forms_are_left_alone(
    value: str, tmp_path: Path
) -> None:
    assert not owner_gone(value, host="h", proc=fake_proc(tmp_path, 1, "5"))


@pytest.mark.parametrize(
    "labels,state,exit_code,expected",
    [
        ({L.STAGE: "builder"}, "exited", 255, True),  # the engine died under the step
        ({L.STAGE: "builder"}, "exited", 0, False),  # ended well: the builder commits it
        ({L.STAGE: "builder"}, "running", 255, False),
        ({L.CELL: "2.13.0-cpu-py3.11"}, "exited", 1, False),  # a user's container of an image
    ],
)
def test_only_a_builder_stage_step_that_ended_badly_is_a_build_orphan(
    labels: dict[str, str], state: str, exit_code: int, expected: bool
) -> None:
    assert is_failed_build_step(labels, state, exit_code) is expected


def test_what_was_removed_is_one_line_naming_up_to_three() -> None:
    one = [Orphan("a" * 64, "imagekit-run-1", "its run ended without removing it")]
    assert removed_line(one) == (
        "removed 1 container that ended runs left behind "
        "(imagekit-run-1: its run ended without removing it)"
    )
    many = [Orphan(f"{n}" * 64, "", "a build step that ended (255)") for n in range(5)]
    line = removed_line(many)
    assert line.startswith("removed 5 containers") and line.count(", ") == 3 and "..." in line
    assert removed_line([]) == ""
