"""The GitHub Actions workflows: valid, pinned, least-privilege, and every imagekit call exists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from imagekit.cli import app

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
runner = CliRunner()


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_there_are_the_ci_and_images_workflows() -> None:
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "images.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_validates_against_the_github_workflow_schema(path: Path) -> None:
    binary = shutil.which("check-jsonschema") or str(
        Path(sys.executable).parent / "check-jsonschema"
    )
    done = subprocess.run(
        [binary, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_third_party_actions_are_pinned_by_commit(path: Path) -> None:
    for step in steps(load(path)):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_least_privilege(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        granted = job.get("permissions", {})
        assert set(granted.values()) <= {"read", "write"}
        writes = {k for k, v in granted.items() if v == "write"}
        assert writes <= {"packages"}, f"{name} asks for {writes}"


def test_images_workflow_is_fail_slow_and_publishes_only_after_verification() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "images.yml")["jobs"]
    for name in ("slim", "full", "gpu"):
        assert jobs[name]["strategy"]["fail-fast"] is False
    assert jobs["gpu"]["runs-on"] == ["self-hosted", "gpu"]
    assert "vars.GPU_RUNNERS == 'true'" in jobs["gpu"]["if"]
    assert set(jobs["publish"]["needs"]) >= {"slim", "full", "gpu"}
    condition = jobs["publish"]["if"]
    assert "needs.gpu.result == 'success' || needs.gpu.result == 'skipped'" in condition
    assert "needs.slim.result == 'success'" in condition


def _imagekit_calls(script: str) -> list[list[str]]:
    """Every `imagekit ...` command line in a run: script, expressions replaced by a word."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "X", script).replace("\\\n", " ")
    text = text.replace('"${only[@]}"', "")
    calls = []
    for match in re.finditer(r"\bimagekit\s+([^|;&)>\n]*)", text):
        calls.append(match.group(1).replace('"', " ").replace("'", " ").split())
    return calls


ALL_CALLS = [
    (path.name, call)
    for path in WORKFLOWS
    for step in steps(load(path))
    for call in _imagekit_calls(step.get("run", ""))
]


def test_the_workflows_call_imagekit() -> None:
    commands = {call[0] for _, call in ALL_CALLS}
    assert {"check", "matrix", "build", "verify", "publish", "report"} <= commands


@pytest.mark.parametrize(
    "workflow,call", ALL_CALLS, ids=lambda x: x if isinstance(x, str) else " ".join(x)
)
def test_every_imagekit_command_in_a_workflow_exists_with_its_options(
    workflow: str, call: list[str]
) -> None:
    command = [w for w in call if not w.startswith("-")][:1]
    if call[:2] == ["compat", "explain"]:
        command = call[:2]
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, f"{workflow}: imagekit {' '.join(command)} does not exist"
    help_text = result.stdout
    for word in call:
        if word.startswith("--"):
            option = word.split("=")[0]
            assert option in help_text, f"{workflow}: imagekit {command[0]} has no {option}"
