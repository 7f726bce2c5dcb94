"""`imagekit export` of the demo images, by a real non-root host account, used by a real HPC
runtime: two exports of one image are the same (a folder of the slim: every entry's name, type,
mode, size, content, time and link target; a squashfs file of the base: its bytes), the account
owns what it exported, `/ch/environment` puts the venv on PATH, and `ch-run DIR -- python3 -c
'import torch'` works as that account.

The account is made by the test (useradd, in the `docker` group) and removed with its home,
which holds every export. Where the engine's socket is not the docker group's to use, root
exports into a folder opened to all (`chmod -R a+rX`) instead, and the test says so.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.children import default_stop_signals
from tests.integration.conftest import DemoBuild
from tests.integration.test_rootless_podman import free_uid

pytestmark = [pytest.mark.integration, pytest.mark.beside]

SLIM_RECORD = "2.13.0-cpu-py3.11-slim"
SOCKET = Path("/var/run/docker.sock")


@dataclass(frozen=True)
class Account:
    """Who exports and runs: a host account in the docker group, or root where the socket is
    not the group's to use (`exports_as_root`)."""

    name: str
    uid: int
    gid: int
    home: Path
    exports_as_root: bool

    def run(self, *argv: str, cwd: Path, as_root: bool = False) -> subprocess.CompletedProcess[str]:
        become = None if as_root else self._become()
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "DOCKER_HOST")}
        env = {**keep, "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name}
        return subprocess.run(
            list(argv), cwd=cwd, env=env, preexec_fn=become or default_stop_signals,
            capture_output=True, text=True, timeout=900, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def _become(self) -> Callable[[], None]:
        groups = [self.gid, grp.getgrnam("docker").gr_gid]

        def child() -> None:
            os.setgroups(groups)
            os.setgid(self.gid)
            os.setuid(self.uid)
            default_stop_signals()

        return child


def socket_is_the_groups() -> bool:
    """Whether a member of the `docker` group may use the engine's socket."""
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        return False
    if os.environ.get("DOCKER_HOST", "unix://").split("://")[0] != "unix" or not SOCKET.exists():
        return False
    info = SOCKET.stat()
    return info.st_gid == docker_gid and bool(info.st_mode & stat.S_IRGRP and info.st_mode & 0o020)


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    """A non-root host account (in the docker group where there is one), removed afterwards
    with its home."""
    name = f"ikx{secrets.token_hex(3)}"
    groups = ["--groups", "docker"] if socket_is_the_groups() else []
    subprocess.run(
        ["useradd", "--create-home", "--uid", str(free_uid(1700)), *groups,
         "--shell", "/bin/bash", name],
        check=True,
    )  # fmt: skip
    entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    try:
        yield Account(name, entry.pw_uid, entry.pw_gid, home, not groups)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, check=False)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def slim(demo_build: DemoBuild) -> str:
    """The session's demo slim image (built from this checkout's template)."""
    return str(demo_build.records[SLIM_RECORD]["build"]["image_id"])


@dataclass(frozen=True)
class Exports:
    """Two folders and two squashfs files of the one image, and what the commands said."""

    folder: Path
    dirs: tuple[Path, Path]
    squashfs: tuple[Path, Path]
    documents: dict[str, dict]


@pytest.fixture(scope="module")
def exports(account: Account, slim: str, demo_base: str) -> Exports:
    """The slim image exported twice as a folder, and the demo's base (a quarter of the slim's
    size: mksquashfs on 2 cores takes minutes for the slim) twice as a squashfs file, by the
    account (or by root, the results opened to all)."""
    folder = account.home / "exports"
    folder.mkdir(mode=0o755)
    os.chown(folder, 0 if account.exports_as_root else account.uid, account.gid)
    if account.exports_as_root:
        print(f"\nexport: the docker socket is not the docker group's; root exports into {folder}")
    documents = {}
    asked = (("a", "dir", slim), ("b", "dir", slim))
    asked += (("a.sqfs", "squashfs", demo_base), ("b.sqfs", "squashfs", demo_base))
    for out, how, image in asked:
        argv = [sys.executable, "-m", "imagekit", "export", image, "--format", how, "--out", out]
        done = account.run(*argv, "--json", cwd=folder, as_root=account.exports_as_root)
        assert done.returncode == 0, done.stderr[-3000:]
        said = documents[out] = json.loads(done.stdout)
        print(f"\nexport {how}: {said['seconds']} s, {said['size_bytes']} bytes, {said['entries']}")
    if account.exports_as_root:
        subprocess.run(["chmod", "-R", "a+rX", str(folder)], check=True)
    dirs, files = (folder / "a", folder / "b"), (folder / "a.sqfs", folder / "b.sqfs")
    return Exports(folder, dirs, files, documents)


def manifest(root: Path) -> list[tuple[str, str, int, int, str, int, str]]:
    """Every entry under `root`: its path, type, mode, size, sha256 (files), time (ns), and
    link target (links)."""
    found = []
    for here, folders, files in os.walk(root):
        for name in (*folders, *files):
            path = Path(here) / name
            info = path.lstat()
            kind, digest, target = stat.filemode(info.st_mode)[0], "", ""
            if stat.S_ISREG(info.st_mode):
                with path.open("rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
            elif stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
            relative = str(path.relative_to(root))
            mode = stat.S_IMODE(info.st_mode)
            found.append((relative, kind, mode, info.st_size, digest, info.st_mtime_ns, target))
    return sorted(found)


def test_two_folder_exports_are_the_same_tree_owned_by_whoever_exported(
    exports: Exports, account: Account
) -> None:
    first, second = (manifest(d) for d in exports.dirs)
    assert len(first) > 10_000 and first == second
    assert exports.documents["a"]["entries"] == len(first)
    paths = {entry[0] for entry in first}
    assert {"opt/venv/bin/python3", "ch/environment", "etc/environment", "proc", "tmp"} <= paths
    assert ".singularity.d/env/80-imagekit.sh" in paths
    owner = 0 if account.exports_as_root else account.uid
    owners = {(exports.dirs[0] / p).lstat().st_uid for p in paths}
    assert owners == {owner}  # never chowned to the image's owners


def test_two_squashfs_exports_are_the_same_bytes(exports: Exports) -> None:
    first, second = exports.squashfs
    assert first.stat().st_size > 50_000_000
    assert subprocess.run(["cmp", str(first), str(second)], check=False).returncode == 0
    listed = subprocess.run(
        ["unsquashfs", "-lls", str(first), "/ch/environment"], capture_output=True, text=True
    )
    assert listed.returncode == 0 and "root/root" in listed.stdout  # -all-root


def test_the_charliecloud_environment_puts_the_venv_on_path(exports: Exports) -> None:
    lines = (exports.dirs[0] / "ch" / "environment").read_text().splitlines()
    path = next(line for line in lines if line.startswith("PATH="))
    assert path.removeprefix("PATH=").split(":")[0] == "/opt/venv/bin"
    assert not any(line.startswith("HOME=") for line in lines)


def test_ch_run_imports_torch_as_the_account(exports: Exports, account: Account) -> None:
    started = time.monotonic()
    image = str(exports.dirs[0])
    code = "import sys, torch; print(sys.prefix, torch.__version__)"
    done = account.run("ch-run", image, "--", "/opt/venv/bin/python3", "-c", code, cwd=account.home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("/opt/venv ")
    which = "command -v python3; id -u"
    with_env = account.run("ch-run", "--set-env", image, "--", "sh", "-c", which, cwd=account.home)
    assert with_env.stdout.split() == ["/opt/venv/bin/python3", str(account.uid)], with_env.stderr
    print(f"\nch-run import torch: {time.monotonic() - started:.1f} s")


def test_an_existing_out_is_refused_and_left_as_it_is(
    exports: Exports, account: Account, slim: str
) -> None:
    before = manifest(exports.dirs[1])[:50]
    argv = [sys.executable, "-m", "imagekit", "export", slim, "--out", "b"]
    done = account.run(*argv, cwd=exports.folder, as_root=account.exports_as_root)
    assert done.returncode == 2
    assert "remove it, or pick another --out" in done.stderr
    assert manifest(exports.dirs[1])[:50] == before
    assert sorted(p.name for p in exports.folder.iterdir()) == ["a", "a.sqfs", "b", "b.sqfs"]
