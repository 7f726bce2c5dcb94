"""Distribution packages: one list per build step (build/distro_packages.py), a base that can
carry them (`base bootstrap --packages-for`), and the rendered steps that install only what the
base lacks, or fail with one line where no package mirror answers.

The rendered install block is run here by bash itself, with `dpkg-query` and `apt-get` stand-ins
on PATH: the shell logic is what decides whether an air-gapped build needs a mirror.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from imagekit.build.distro_packages import (
    BASE_PACKAGES,
    full_packages,
    packages_for,
    slim_packages,
)
from imagekit.build.render import render_image
from imagekit.build.requests import BootstrapCommand
from imagekit.build.stream import FAILURE_MARKER, BuildLog
from imagekit.kernel.vocabulary import Flavour
from imagekit.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parents[3]
SLIM, FULL = "2.13.0-cpu-py3.11-slim", "2.13.0-cpu-py3.11-full"


def rendered(name: str) -> str:
    plans = load_matrix(ROOT / "tests" / "golden" / "matrix.yaml").plans
    return render_image(next(p for p in plans if p.name == name)).dockerfile


def install_blocks(dockerfile: str) -> list[str]:
    """Each `{ missing=() ... fi; }` block, as the shell gets it (continuations joined)."""
    joined = dockerfile.replace("\\\n", "")
    return re.findall(r"\{ missing=\(\);.*?fi; \}", joined)


def test_full_carries_slims_packages_and_neither_repeats_the_base() -> None:
    slim, full = packages_for(Flavour.SLIM), packages_for(Flavour.FULL)
    assert slim == ("g++", "openssl", "python3-dev")
    assert set(slim) < set(full) and "openssh-server" in full and "tini" in full
    assert not set(full) & set(BASE_PACKAGES) and len(set(full)) == len(full)


def test_packages_for_adds_to_include_and_the_default_adds_nothing() -> None:
    plain = BootstrapCommand(suite="bookworm", tag="b/debian:bookworm")
    assert plain.packages == BASE_PACKAGES
    made = BootstrapCommand(
        suite="bookworm", tag="b/debian:bookworm", include=("python3", "git"),
        packages_for=Flavour.FULL,
    )  # fmt: skip
    assert made.packages[:2] == ("python3", "git") and "openssh-server" in made.packages
    assert made.packages.count("git") == 1


def test_the_rendered_steps_ask_dpkg_for_exactly_their_steps_packages() -> None:
    (slim_block,) = install_blocks(rendered(SLIM))
    (full_block,) = install_blocks(rendered(FULL))
    assert f"for package in {' '.join(slim_packages('3.11', compile=True))};" in slim_block
    assert f"for package in {' '.join(full_packages('3.11'))};" in full_block
    # No step runs apt-get unless the base lacks what it needs.
    for dockerfile in (rendered(SLIM), rendered(FULL)):
        outside = re.sub(r"\{ missing=\(\);.*?fi; \}", "", dockerfile.replace("\\\n", ""))
        outside = re.sub(r"if ! [^;]*; then .*?fi", "", outside)
        assert "apt-get update" not in outside


FAKE_DPKG = """#!/bin/sh
for p in $FAKE_INSTALLED; do [ "$p" = "$3" ] && { printf 'ii '; exit 0; }; done
exit 1
"""
NO_MIRROR = (
    "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  "
    "Temporary failure resolving 'deb.debian.org'"
)
FAKE_APT = f"""#!/bin/sh
echo "$@" >>"$FAKE_APT_LOG"
if [ -n "$FAKE_NO_MIRROR" ]; then
  case "$1" in
    update) echo "{NO_MIRROR}"; exit 0;;
    install) echo "E: Unable to locate package $5"; exit 100;;
  esac
fi
exit 0
"""


def run_block(block: str, tmp_path: Path, installed: str, no_mirror: bool) -> tuple[int, str, str]:
    """Run one rendered install block under bash with stand-ins; its exit, stderr and the
    apt-get calls made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("dpkg-query", FAKE_DPKG), ("apt-get", FAKE_APT)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # The block's own paths point into the test's folder: it must not touch the host's apt
    # lists, logs and caches, which its clean-up removes.
    script = re.sub(r"(?<=\s)/var/", f"{tmp_path}/var/", block)
    (tmp_path / "var" / "lib" / "apt" / "lists").mkdir(parents=True, exist_ok=True)
    script = script.replace("/tmp/imagekit-apt.log", str(tmp_path / "apt.log"))
    apt_log = tmp_path / "calls.log"
    apt_log.write_text("")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_INSTALLED": installed,
        "FAKE_APT_LOG": str(apt_log),
        "FAKE_NO_MIRROR": "1" if no_mirror else "",
    }
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, env=env
    )
    return done.returncode, done.stderr, apt_log.read_text()


def test_a_base_with_every_package_runs_no_apt_at_all(tmp_path: Path) -> None:
    (block,) = install_blocks(rendered(FULL))
    code, _, calls = run_block(block, tmp_path, " ".join(full_packages("3.11")), no_mirror=True)
    assert (code, calls) == (0, "")


def test_only_what_the_base_lacks_is_installed(tmp_path: Path) -> None:
    (block,) = install_blocks(rendered(SLIM))
    code, _, calls = run_block(block, tmp_path, "g++", no_mirror=False)
    assert code == 0
    assert "install -y --no-install-recommends openssl python3.11-dev" in calls
    assert "clean" in calls


def test_no_mirror_is_one_marked_line_naming_step_packages_cause_and_fixes(tmp_path: Path) -> None:
    (block,) = install_blocks(rendered(SLIM))
    code, stderr, _ = run_block(block, tmp_path, "g++", no_mirror=True)
    assert code == 1
    (line,) = [x for x in stderr.splitlines() if x.startswith(FAILURE_MARKER)]
    assert "slim's runtime stage" in line and "needs openssl python3.11-dev," in line
    assert "Temporary failure resolving 'deb.debian.org'" in line
    assert "--packages-for slim" in line and "compile: false" in line


@pytest.mark.parametrize("prefix", ["", "#11 3.207 "], ids=["legacy", "buildkit"])
def test_the_marked_line_is_the_failures_reason(prefix: str) -> None:
    log = BuildLog()
    log.feed({"stream": f"{prefix}{FAILURE_MARKER} full's workstation stage needs tini, ...\n"})
    log.feed({"error": "The command '/bin/bash -o pipefail -c { missing=() ...' returned 1"})
    first = log.failure_message().splitlines()[0]
    assert first == "full's workstation stage needs tini, ..."


class Ran:
    def __init__(self, rc: int) -> None:
        self.rc, self.stdout, self.stderr = rc, "True True\n", ""


class Exists:
    def __init__(self, exists: bool) -> None:
        self.exists = exists


class SlimRoot:
    """A testinfra host stand-in for a slim image on a base with sshd and compilers."""

    def file(self, path: str) -> Exists:
        return Exists(path == "/usr/sbin/sshd")

    def run(self, command: str) -> Ran:
        return Ran(0)  # every `command -v` finds its compiler


FULL_BASE = ",".join((*BASE_PACKAGES, *packages_for(Flavour.FULL)))


@pytest.mark.parametrize("base", ["", FULL_BASE], ids=["other-base", "base-for-full"])
def test_slim_passes_with_sshd_and_compilers_only_when_its_base_brought_them(base: str) -> None:
    from imagekit.adapters.structure import _flavour_checks
    from imagekit.kernel import labels as L
    from imagekit.kernel.labels import ImageLabels

    labels = ImageLabels.parse(
        {L.TORCH: "2.13.0", L.FLAVOUR: "slim", L.TORCH_COMPILE: "no", L.BASE_INCLUDE: base}
    )
    services, compilers = _flavour_checks(labels, SlimRoot())
    assert (services.ok, compilers.ok) == (bool(base), bool(base))
    assert ("from its base" in services.detail) is bool(base)


def test_the_bootstrap_installs_them_and_leaves_no_ssh_host_key_in_the_base() -> None:
    from imagekit.adapters.baseimage import mmdebstrap_command

    command = BootstrapCommand(suite="bookworm", tag="b/debian:bookworm", packages_for=Flavour.FULL)
    argv = mmdebstrap_command(command, Path("r.tar"))
    (include,) = [a for a in argv if a.startswith("--include=")]
    assert include == "--include=" + ",".join(command.packages)
    hook = next(a for a in argv if a.startswith("--customize-hook=rm "))
    assert "$1/etc/ssh/ssh_host_*_key " in hook  # openssh-server's install made them


def test_the_bootstrap_gives_a_minbase_root_an_etc_hosts_and_keeps_one_it_has(
    tmp_path: Path,
) -> None:
    """mmdebstrap runs each hook with sh, the root as $1: the hosts hook writes netbase's file
    where there is none (a BuildKit RUN would otherwise make and remove a stub in /etc, and stamp
    /etc with that moment), and leaves one the packages installed alone."""
    import subprocess

    from imagekit.adapters.baseimage import mmdebstrap_command

    command = BootstrapCommand(suite="bookworm", tag="b/debian:bookworm")
    argv = mmdebstrap_command(command, Path("r.tar"))
    (hook,) = [a.split("=", 1)[1] for a in argv if "etc/hosts" in a]
    bare, kept = tmp_path / "bare", tmp_path / "kept"
    for root in (bare, kept):
        (root / "etc").mkdir(parents=True)
    (kept / "etc" / "hosts").write_text("10.0.0.1 mine\n")
    for root in (bare, kept):
        env = {"PATH": "/usr/bin:/bin", "SOURCE_DATE_EPOCH": "1700000000"}
        subprocess.run(["sh", "-c", hook, "sh", str(root)], check=True, env=env)
    # The epoch's time, on the file and on /etc, as every other file of a reproducible base.
    assert {int((bare / p).stat().st_mtime) for p in ("etc", "etc/hosts")} == {1_700_000_000}
    assert (bare / "etc" / "hosts").read_text().splitlines() == [
        "127.0.0.1\tlocalhost", "::1\t\tlocalhost ip6-localhost ip6-loopback"
    ]  # fmt: skip
    assert (kept / "etc" / "hosts").read_text() == "10.0.0.1 mine\n"
