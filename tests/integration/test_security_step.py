"""A base imagekit did not bootstrap (a registry's `debian:bookworm`, `ubuntu:24.04`) takes its
security suite's fixes in the build: the demo slim on such a base, built, is clean by the audit's
own reading of Debian's security suite, and a second build on the same suite is up to date.

The base is the bookworm release alone (bootstrapped without the security suite) imported as a
plain image, without imagekit's labels, as a registry serves one: its packages are as old as the
release's last point release, so the fixes it lacks are real ones.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.integration.conftest import Session, imagekit, matrix_text

# In the session beside the main one (scripts/run-tests.sh): nothing here needs the demo build.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

SLIM = "2.13.0-cpu-py3.11-slim"


# Kept on the engine between runs, as the boxes are (tests/integration/engines.py): the same
# release gives the same bootstrapped image, whose id the plain one names, so a later run finds
# it, and the slim's build on it is cached (an import is a new image id every time).
PLAIN = "imagekit-box/plain-debian:bookworm"
PLAIN_FROM = "imagekit.test.plain-from"


@pytest.fixture(scope="module")
def plain_base(session: Session, engine: docker.DockerClient) -> str:
    """bookworm without its security suite, as a label-less image (docker export | import)."""
    namespace = session.repository.split("/")[0]
    made = f"{namespace}-old/debian:bookworm"
    done = imagekit(
        "base", "bootstrap", "--suite", "bookworm", "--security-mirror", "none", "--tag", made
    )
    assert done.code == 0, done.stderr
    made_id = str(engine.images.get(made).id)
    with contextlib.suppress(docker.errors.ImageNotFound):
        if (engine.images.get(PLAIN).labels or {}).get(PLAIN_FROM) == made_id:
            return PLAIN
    container = engine.containers.create(made, command="true")
    try:
        exported = subprocess.Popen(["docker", "export", container.id], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "--change", "CMD [\"/bin/bash\"]",
             "--change", f"LABEL {PLAIN_FROM}={made_id}", "-", PLAIN],
            stdin=exported.stdout, capture_output=True, text=True, check=False,
        )  # fmt: skip
        exported.wait()
        assert imported.returncode == 0, imported.stderr
    finally:
        container.remove(force=True)
    labels = engine.images.get(PLAIN).labels or {}
    assert not any(k.startswith("io.imagekit.") for k in labels), labels
    return PLAIN


def test_the_slim_on_a_plain_base_takes_the_fixes_and_a_rebuild_is_up_to_date(
    tmp_path: Path, session: Session, plain_base: str, wheelhouse: Path
) -> None:
    matrix = tmp_path / "matrix.yaml"
    # The upgraded packages are a layer above the base's copies of them: room for it.
    text = matrix_text(session.repository, plain_base)
    matrix.write_text(
        text.replace("size_budget_bytes: 1_600_000_000", "size_budget_bytes: 1_700_000_000")
    )
    results = tmp_path / "results"
    common = ("--matrix", str(matrix), "--only", SLIM, "--results", str(results))
    built = imagekit("build", *common, "--wheelhouse", str(wheelhouse), "--json")
    assert built.code == 0, built.stderr
    [run] = [p for p in results.iterdir() if p.is_dir()]
    dockerfile = (run / "contexts" / SLIM / "Dockerfile").read_text()
    assert "deb http://deb.debian.org/debian-security bookworm-security main" in dockerfile
    # What the audit reads from the same suite: nothing left to fix.
    audited = imagekit("audit", *common, "--json")
    assert audited.code == 0, audited.stderr
    [record] = [i["audit"] for i in json.loads(audited.stdout)["images"].values()]
    assert record["status"] == "pass" and not [f for f in record["findings"] if f["fixed"]]
    # The suite unchanged since: the image is up to date (a new fix would build it again).
    again = imagekit("build", *common, "--wheelhouse", str(wheelhouse), "--json")
    assert again.code == 0, again.stderr
    assert "up to date" in again.stderr + again.stdout
