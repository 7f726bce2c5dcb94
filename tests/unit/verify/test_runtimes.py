"""HPC runtimes, as plain values: the environment files an image carries, the checks that read
them back, the ch-run command line, and what `--runtime` plans and records."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imagekit.errors import InputError
from imagekit.kernel.runtime import GpuChoice
from imagekit.kernel.runtime_env import (
    HOST_PATH,
    RuntimeFile,
    build_commands,
    environment_of,
    quoted,
    runtime_files,
)
from imagekit.kernel.vocabulary import Runtime
from imagekit.verify.requests import VerifySettings
from imagekit.verify.runtime_conventions import SCRIPT, parse_facts, runtime_checks
from imagekit.verify.runtimes import (
    PROBES_AT,
    ch_run_command,
    missing_runtime,
    runtime_environment,
)
from imagekit.verify.summary import platform_text
from tests.unit.verify.test_verify_plan import DOCKER, SLIM, TARGET, plan_of

VENV = "/opt/venv"
ENV = [
    "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/home/ml",
    "LANG=C.UTF-8",
    "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470 it's",
]


def test_the_environment_files_carry_the_image_env_but_never_its_home() -> None:
    environment = environment_of(ENV)
    assert "HOME" not in environment and environment["LANG"] == "C.UTF-8"
    files = runtime_files(environment)
    assert files[RuntimeFile.CHARLIECLOUD] == files[RuntimeFile.ENROOT]
    assert files[RuntimeFile.ENROOT].splitlines()[0] == ENV[0]
    assert "HOME=" not in "".join(files.values())


def test_apptainer_sources_its_file_with_every_value_intact(tmp_path: Path) -> None:
    file = tmp_path / "80-imagekit.sh"
    file.write_text(runtime_files(environment_of(ENV))[RuntimeFile.APPTAINER])
    said = subprocess.run(
        ["env", "-i", "sh", "-c", '. "$0" && printf %s "$NVIDIA_REQUIRE_CUDA"', str(file)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert said.stdout == ENV[3].partition("=")[2]


def test_the_build_writes_the_same_bytes_as_the_export(tmp_path: Path) -> None:
    """The image's RUN (bash, from the build's environment) and `runtime_files` (export, from
    the configuration) agree byte for byte, quoting included."""
    environment = environment_of(ENV)
    commands = build_commands(list(environment))
    for where in RuntimeFile:
        commands = commands.replace(f" {where}", f" {tmp_path}{where}")
    folders = " ".join(f"{tmp_path}{Path(w).parent}" for w in RuntimeFile)
    commands = commands.replace("install -d -m 0755 ", f"install -d -m 0755 {folders} ", 1)
    subprocess.run(["bash", "-c", commands], env=environment, check=True)
    for where, text in runtime_files(environment).items():
        assert (tmp_path / where.lstrip("/")).read_text() == text, where


def test_quoting_is_bashs() -> None:
    assert quoted("it's") == "'it'\\''s'"
    said = subprocess.run(
        ["bash", "-c", 'v="it\'s"; printf %s "${v@Q}"'], capture_output=True, text=True, check=True
    )
    assert said.stdout == quoted("it's")


def test_the_script_reads_each_convention_and_a_good_image_passes() -> None:
    facts = parse_facts(
        f"host-prefix={VENV}\nhost-torch=yes\n"
        + "".join(f"{where}={VENV}/bin/python3\n" for where in RuntimeFile)
    )
    checks = runtime_checks(facts, VENV)
    assert len(checks) == 4 and all(c.ok for c in checks), checks
    assert "PATH=" in SCRIPT and HOST_PATH in SCRIPT


def test_an_image_whose_venv_is_not_on_the_hosts_path_fails_with_that_reason() -> None:
    """An image built before the runtime files: python3 is the base's, torch is missing."""
    facts = parse_facts(
        "host-prefix=/usr\nhost-torch=no\n" + "".join(f"{w}=\n" for w in RuntimeFile)
    )
    checks = runtime_checks(facts, VENV)
    assert not any(c.ok for c in checks)
    first = checks[0]
    assert "python3 is /usr's, not the venv /opt/venv's" in first.detail
    assert "import torch fails" in first.detail
    assert "not found" in checks[1].detail


def test_ch_run_runs_as_a_user_would_with_no_set_env() -> None:
    command = ch_run_command(Path("/scratch/image"), Path("/scratch/probes"), ["python3", "x"])
    assert command[0] == "ch-run" and "--set-env" not in " ".join(command)
    assert f"--bind=/scratch/probes:{PROBES_AT}" in command
    assert command[-4:] == ["/scratch/image", "--", "python3", "x"]
    env = runtime_environment({"PYTHONPATH": "/x", "PATH": "/usr/bin", "VIRTUAL_ENV": "/v"}, "me")
    assert env == {"USER": "me", "PATH": "/usr/bin"}
    assert runtime_environment({"USER": "you"}, "me")["USER"] == "you"


@pytest.mark.parametrize("runtime", [Runtime.APPTAINER, Runtime.ENROOT, Runtime.CHARLIECLOUD])
def test_a_runtime_not_installed_is_one_line_naming_what_to_install(runtime: Runtime) -> None:
    why = missing_runtime(runtime, found=False)
    assert why is not None and "install" in why and "\n" not in why


def test_apptainer_installed_is_still_no_runner_and_says_what_to_do_instead() -> None:
    why = missing_runtime(Runtime.APPTAINER, found=True)
    assert why is not None and "imagekit export" in why and "hpc.md" in why
    assert missing_runtime(Runtime.CHARLIECLOUD, found=True) is None


def test_nodes_are_the_engines_not_a_runtimes() -> None:
    with pytest.raises(InputError, match="--nodes 2 runs in the engine's containers"):
        VerifySettings(runtime=Runtime.CHARLIECLOUD, nodes=2)


def test_under_charliecloud_the_gpus_are_the_hosts_not_the_engines() -> None:
    """The engine has no GPU runtime: Docker would refuse --gpus all up front; under ch-run
    the host's driver is injected instead, and auto runs the CPU probes, saying so."""
    asked = plan_of(DOCKER, gpus=GpuChoice.ALL, runtime=Runtime.CHARLIECLOUD)
    assert asked.gpus
    auto = plan_of(DOCKER, runtime=Runtime.CHARLIECLOUD)
    assert not auto.gpus and "ch-fromhost --nvidia" in auto.notes[0]


def test_the_record_names_the_runtime_and_the_page_shows_it() -> None:
    from imagekit.verify.ports import ProbeRun
    from imagekit.verify.probes import RunnerOutput
    from imagekit.verify.record import Inspection, record_of
    from tests.fakes import passing
    from tests.unit.verify.test_verify_plan import SPECS

    plan = plan_of(DOCKER, runtime=Runtime.CHARLIECLOUD)
    planned = plan.for_target(TARGET, SLIM, "run-1", gpus=False)
    results = tuple(passing(p) for p in planned.request.probes)
    outcome = ProbeRun(RunnerOutput("cpu", "", results), "", 0, False, 1.0)
    record = record_of(planned, outcome, Inspection((), ()), SPECS, 2.0)
    assert record.runtime is Runtime.CHARLIECLOUD
    assert platform_text(record) == "linux/amd64 under charliecloud"
    docker = record_of(
        plan_of(DOCKER).for_target(TARGET, SLIM, "run-1", gpus=False), outcome,
        Inspection((), ()), SPECS, 2.0,
    )  # fmt: skip
    assert docker.runtime is Runtime.DOCKER and platform_text(docker) == "linux/amd64"
