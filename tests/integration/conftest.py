"""Fixtures for tests against a real Docker engine.

Every image these tests build goes to a repository unique to the session
(`imagekit-it-<hex>/pytorch`), and the session removes those images, the
containers it made and (when it runs alone on the engine: tests/integration/sweep.py) the
dangling build-stage images that appeared while it ran. A missing engine fails the
tests: CI must never pass by skipping them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.integration.sweep import dangling, remove_names, session_sweeps, sweep

ROOT = Path(__file__).resolve().parents[2]
DEMO_MATRIX = ROOT / "examples" / "cpu.yaml"

pytestmark = pytest.mark.integration

# The label of every container and image a test makes directly, its value this pytest
# process's own: two sessions share the engine (scripts/run-tests.sh), and each removes only
# what carries its own value (a removal by the label alone took the other's containers).
TEST_LABEL = "io.imagekit.test"
TEST_LABELS = {TEST_LABEL: secrets.token_hex(6)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # The tests beside the main session on its engine (marker beside) run last in theirs: by
    # then the main session's demo build has left in BuildKit's cache the steps bake repeats.
    items.sort(key=lambda item: item.get_closest_marker("beside") is not None)


@pytest.fixture(scope="session")
def engine() -> docker.DockerClient:
    try:
        client = docker.from_env(version="auto", timeout=900)
        client.ping()
    except Exception as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run `make engine` or use `make unit`")
    return client


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    default = Path.home() / ".cache" / "imagekit" / "wheelhouse-cpu"  # as in the Makefile
    value = Path(os.environ.get("IMAGEKIT_WHEELHOUSE") or default)
    if not (value / ".complete").is_file():
        pytest.fail(f"no complete wheelhouse at {value}; run `make wheelhouse` (or make test)")
    return value


@pytest.fixture(scope="session")
def demo_base(engine: docker.DockerClient) -> str:
    base = os.environ.get("IMAGEKIT_DEMO_BASE", "imagekit-base/debian:bookworm")
    try:
        engine.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.fail(f"base image {base} is missing; run `make base`")
    return base


@dataclass
class Session:
    """What this test session made, so it can all be removed."""

    repository: str
    dangling_before: set[str]


@pytest.fixture(scope="session")
def session(engine: docker.DockerClient) -> Iterator[Session]:
    repository = f"imagekit-it-{secrets.token_hex(4)}/pytorch"
    before = dangling(engine)
    made = Session(repository, before)
    yield made
    mine = f"{TEST_LABEL}={TEST_LABELS[TEST_LABEL]}"
    for container in engine.containers.list(all=True, filters={"label": mine}):
        container.remove(force=True)
    namespace = repository.split("/")[0]  # also covers the -broken/ and -bake/ variants

    def made_here(image: docker.models.images.Image) -> bool:
        named = any(namespace in t for t in image.tags)  # also 127.0.0.1:PORT/<namespace>...
        return named or image.labels.get(TEST_LABEL) == TEST_LABELS[TEST_LABEL]

    mine = [i for i in engine.images.list() if made_here(i)]
    # Children before parents; a test that failed half-way may leave a container running.
    # Only this session's tags go (remove_names); the sweep below takes its untagged parents.
    for image in sorted(mine, key=lambda i: i.attrs["Created"], reverse=True):
        for container in engine.containers.list(all=True, filters={"ancestor": image.id}):
            container.remove(force=True)
        remove_names(engine, image.id, [t for t in image.tags if namespace in t])
    # The step images under a labelled image of ours (a hand-written Dockerfile's, whose
    # first step is the label): the list above does not show an image that is another's
    # parent, and once that child is gone it is left untagged.
    steps = engine.api.images(
        all=True, filters={"label": f"{TEST_LABEL}={TEST_LABELS[TEST_LABEL]}"}
    )
    for row in sorted(steps, key=lambda r: r["Created"], reverse=True):
        with contextlib.suppress(docker.errors.APIError):
            engine.api.remove_image(row["Id"], force=True, noprune=True)
    # Build stages, and images left untagged above, that appeared during this session, with
    # the untagged steps under them: the legacy builder keeps an image per step, and only the
    # steps after a stage's LABEL carry it. Not where another session shares the engine
    # (tests/integration/sweep.py): its script sweeps once both are done.
    left = sweep(engine, before) if session_sweeps() else []
    if left:
        print(f"\nimagekit tests: could not remove {len(left)} images: {left[:5]}", file=sys.stderr)


def matrix_text(repository: str, base: str, extra_releases: str = "") -> str:
    """The demo matrix, pointed at this session's repository and base."""
    text = DEMO_MATRIX.read_text()
    text = text.replace("repository: imagekit-demo/pytorch", f"repository: {repository}")
    text = text.replace('"imagekit-base/debian:bookworm"', f'"{base}"')
    if extra_releases:
        text = text.replace("releases:\n", "releases:\n" + extra_releases, 1)
    return text


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def imagekit(*args: str, env: dict[str, str] | None = None, timeout_s: int = 1800) -> CliResult:
    """Run the CLI in a child process, as a user would."""
    full_env = {**os.environ, "CI": "true", **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout_s,
        cwd=ROOT,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class SessionCa:
    """The CA bundle every build of the session gives pip: the system's, plus a marker line
    that no layer of a final image may carry (tests/integration/test_build.py)."""

    path: Path
    marker: str


@pytest.fixture(scope="session", autouse=True)
def session_ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionCa]:
    """One CA bundle for the whole session, also as $PIP_CERT for every child process (the
    CLI and act's jobs take it from there, as a user's would). The builder stages copy it, so
    one bundle for all makes those stages, torch's install among them, one cache entry that
    every build of the demo cell shares, instead of one per bundle (tens of minutes in all)."""
    marker = f"IMAGEKIT-CA-MARKER-{secrets.token_hex(8)}"
    path = tmp_path_factory.mktemp("ca") / "proxy-ca.crt"
    path.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text() + f"# {marker}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIP_CERT", str(path))
        yield SessionCa(path, marker)


@dataclass
class DemoBuild:
    matrix: Path
    results: Path
    run: Path
    records: dict[str, dict]
    marker: str
    first: CliResult


@pytest.fixture(scope="session")
def demo_build(
    tmp_path_factory: pytest.TempPathFactory,
    session: Session,
    session_ca: SessionCa,
    wheelhouse: Path,
    demo_base: str,
) -> DemoBuild:
    """The CPU demo matrix built once (slim and full), with the session's marked CA bundle
    given explicitly."""
    folder = tmp_path_factory.mktemp("demo")
    matrix = folder / "matrix.yaml"
    matrix.write_text(matrix_text(session.repository, demo_base))
    results = folder / "results"
    first = imagekit(
        "build",
        "--matrix",
        str(matrix),
        "--wheelhouse",
        str(wheelhouse),
        "--ca-cert",
        str(session_ca.path),
        "--results",
        str(results),
        "--json",
    )
    assert first.code == 0, first.stderr[-3000:]
    run = json.loads(first.stdout)["run_id"]
    records = {p.stem: json.loads(p.read_text()) for p in (results / run / "images").glob("*.json")}
    return DemoBuild(matrix, results, results / run, records, session_ca.marker, first)


@pytest.fixture(scope="session")
def demo_verify(demo_build: DemoBuild, session: Session) -> dict:
    """The demo matrix verified once."""
    result = imagekit(
        "verify",
        "--matrix",
        str(demo_build.matrix),
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert result.code == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    run = demo_build.results / data["run_id"]
    return {"run": run, "data": data, "stderr": result.stderr}
