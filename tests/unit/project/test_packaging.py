"""The wheel carries everything imagekit needs, and a plain (non-editable) install works.

Builds the wheel once, installs it into a fresh virtualenv once, and runs the installed
`imagekit` from a folder outside the repository, so that the checkout's templates/ and
probes/ cannot stand in for the bundled copies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import imagekit

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
MATRIX = REPO / "matrix.yaml"

BUILD_TIMEOUT_S = 600
INSTALL_TIMEOUT_S = 1200
RUN_TIMEOUT_S = 120


def _env() -> dict[str, str]:
    """The environment for child processes, without anything that could import the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(args: list[str | Path], cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result


@dataclass(frozen=True)
class Installed:
    """A wheel of the checkout and a virtualenv holding it (non-editable)."""

    wheel: Path
    venv: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def imagekit(self) -> Path:
        return self.venv / "bin" / "imagekit"

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """Run a command of the venv with the scratch folder (outside the repo) as cwd."""
        return _run(list(args), cwd=self.workdir, timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", outdir, REPO],
        cwd=REPO,
        timeout=BUILD_TIMEOUT_S,
    )
    wheels = sorted(outdir.glob("imagekit-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {outdir}, found {wheels}"
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "venv"
    _run([sys.executable, "-m", "venv", env_dir], cwd=root, timeout=RUN_TIMEOUT_S)
    _run(
        [env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", wheel],
        cwd=root,
        timeout=INSTALL_TIMEOUT_S,
    )
    workdir = root / "work"
    workdir.mkdir()
    return Installed(wheel=wheel, venv=env_dir, workdir=workdir)


# The wheel's contents ----------------------------------------------------------

REQUIRED_FILES = [
    "imagekit/_bundled/templates/Dockerfile.j2",
    # Copied into each image's structure-check container at verify time (wheel-files).
    "imagekit/_bundled/templates/wheel_files.py",
    "imagekit/data/compat.yaml",
    "imagekit/data/hadolint.yaml",
    "imagekit/data/matrix.schema.json",
    # The run page's templates (imagekit report --html).
    "imagekit/data/site/index.html.j2",
    "imagekit/data/site/image.html.j2",
    "imagekit/data/site/site.css",
]


@pytest.mark.parametrize("member", REQUIRED_FILES)
def test_wheel_contains_data_file(wheel: Path, member: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert member in zf.namelist()


def test_wheel_contains_probes(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        probes = [n for n in zf.namelist() if n.startswith("imagekit/_bundled/probes/")]
    assert probes, "the wheel carries no file under imagekit/_bundled/probes/"


def test_wheel_bundles_the_checkouts_template_unchanged(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        bundled = zf.read("imagekit/_bundled/templates/Dockerfile.j2")
    assert bundled == (REPO / "templates" / "Dockerfile.j2").read_bytes()


def test_wheel_bundles_every_probe_of_the_checkout(wheel: Path) -> None:
    in_repo = {
        p.relative_to(REPO / "probes").as_posix()
        for p in (REPO / "probes").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(wheel) as zf:
        prefix = "imagekit/_bundled/probes/"
        in_wheel = {n.removeprefix(prefix) for n in zf.namelist() if n.startswith(prefix)}
    assert in_repo <= in_wheel


def test_wheel_is_named_for_the_package_version(wheel: Path) -> None:
    assert wheel.name.startswith(f"imagekit-{imagekit.__version__}-")


# The installed wheel -------------------------------------------------------------


def test_installed_package_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    code = (
        "import imagekit, imagekit.resources as r; "
        "print(imagekit.__file__); print(r.templates_dir()); print(r.probes_dir())"
    )
    lines = installed.run(installed.python, "-c", code).stdout.splitlines()
    assert len(lines) == 3
    for line in lines:
        path = Path(line).resolve()
        assert path.is_relative_to(installed.venv.resolve()), f"{path} is outside the venv"
        assert not path.is_relative_to(REPO), f"{path} comes from the checkout"


@pytest.mark.parametrize(
    "command",
    [["imagekit", "--version"], ["python", "-m", "imagekit", "--version"]],
    ids=["console-script", "python-m"],
)
def test_installed_imagekit_prints_its_version(installed: Installed, command: list[str]) -> None:
    executable = installed.venv / "bin" / command[0]
    result = installed.run(executable, *command[1:])
    assert result.stdout.strip() == f"imagekit {imagekit.__version__}"


def test_installed_imagekit_renders_a_dockerfile_for_every_image(installed: Installed) -> None:
    listed = json.loads(
        installed.run(installed.imagekit, "matrix", "--matrix", MATRIX, "--format", "json").stdout
    )
    images = {row["image"] for row in listed}
    assert images, "the default matrix lists no images"

    out = installed.workdir / "out"
    installed.run(installed.imagekit, "render", "--matrix", MATRIX, "--out", out, "--no-ca-cert")

    rendered = {p.parent.name for p in out.glob("*/Dockerfile")}
    assert rendered == images
    for image in sorted(images):
        dockerfile = (out / image / "Dockerfile").read_text(encoding="utf-8")
        assert dockerfile.lstrip().startswith(("#", "ARG", "FROM")), image
        assert "FROM " in dockerfile, image


def test_installed_imagekit_renders_what_the_checkout_renders(
    installed: Installed, tmp_path: Path
) -> None:
    from_wheel = tmp_path / "wheel"
    from_checkout = tmp_path / "checkout"
    args = ["render", "--matrix", MATRIX, "--no-ca-cert"]
    installed.run(installed.imagekit, *args, "--out", from_wheel)
    _run(
        [sys.executable, "-m", "imagekit", *args, "--out", from_checkout],
        cwd=REPO,
        timeout=RUN_TIMEOUT_S,
    )

    def tree(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }

    wheel_tree, checkout_tree = tree(from_wheel), tree(from_checkout)
    assert sorted(wheel_tree) == sorted(checkout_tree)
    differing = [name for name in wheel_tree if wheel_tree[name] != checkout_tree[name]]
    assert differing == []
