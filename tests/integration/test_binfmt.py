"""arm64 emulation registered without systemd (scripts/register-binfmt.sh), from an
unregistered state, on this machine's kernel: what `make engine` does on a fresh machine, where
qemu-user-binfmt's /usr/lib/binfmt.d files are there and nothing has loaded them.

The entry is the kernel's, shared by the whole machine: the test puts back what it found.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration

MISC = Path("/proc/sys/fs/binfmt_misc")
ENTRY = MISC / "qemu-aarch64"
CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")


def register(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "register-binfmt.sh"), "qemu-aarch64"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def test_qemu_aarch64_is_registered_from_binfmt_d_and_arch_test_runs_arm64() -> None:
    if not CONF.is_file() or shutil.which("arch-test") is None:
        pytest.fail(f"{CONF} or arch-test is missing: run `make engine`")
    was_there = ENTRY.exists()
    if was_there:
        ENTRY.write_text("-1")  # unregistered, as on a fresh machine
    try:
        assert not ENTRY.exists()
        assert subprocess.run(["arch-test", "arm64"], capture_output=True).returncode != 0
        done = register()
        assert done.returncode == 0, done.stderr
        assert f"registered qemu-aarch64 from {CONF}" in done.stderr
        assert ENTRY.read_text().splitlines()[0] == "enabled"
        assert subprocess.run(["arch-test", "arm64"], capture_output=True).returncode == 0
        again = register()  # already registered: nothing to do, nothing said
        assert again.returncode == 0 and again.stderr == ""
    finally:
        if not ENTRY.exists() and was_there:
            register()


def test_without_a_line_for_it_the_script_says_where_it_looked(tmp_path: Path) -> None:
    fake = tmp_path / "binfmt_misc"
    fake.mkdir()
    (fake / "register").write_text("")
    done = register({"BINFMT_MISC": str(fake), "BINFMT_D": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert f"no line for it in {tmp_path}/*.conf" in done.stderr
