"""The start-up hook every image carries (templates/imagekit_site.py), run in a real Python.

The images' own behaviour (the .pth file in the venv, Docker's 64 MB /dev/shm) is covered by
tests/integration/test_image_use.py; these run the same module against this venv's torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
sys.path.insert(0, str(TEMPLATES))
import imagekit_site  # noqa: E402 - the templates folder is not a package

from tests.host_torch import needs_torch  # noqa: E402

COMPILE_TWICE = """
import imagekit_site
imagekit_site.start()
imagekit_site.start()  # site.py may read the .pth twice: it still says so once
import torch
f = torch.compile(lambda x: x + 1)
g = torch.compile(lambda x: x * 2)
h = torch.compile(lambda x: x - 1, backend="aot_eager")
print(h(torch.ones(2)).tolist())
"""


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    environ |= {"PYTHONPATH": str(TEMPLATES), **env}
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300
    )


@needs_torch
def test_an_image_without_compile_says_so_once_at_the_first_inductor_compile() -> None:
    done = run_python(COMPILE_TWICE, IMAGEKIT_TORCH_COMPILE="no")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("torch.compile's default backend, inductor") == 1
    assert 'backend="aot_eager"' in done.stderr and "full image" in done.stderr
    assert done.stdout.strip() == "[0.0, 0.0]"  # aot_eager still works, silently


@needs_torch
def test_an_image_that_compiles_and_import_torch_say_nothing() -> None:
    for setting in ("yes", ""):
        done = run_python(COMPILE_TWICE, IMAGEKIT_TORCH_COMPILE=setting)
        assert done.returncode == 0, done.stderr
        assert "imagekit" not in done.stderr


def test_the_shm_warning_names_the_fixes_and_the_size() -> None:
    line = imagekit_site.shm_warning(64 << 20)
    assert "64 MiB" in line and "--shm-size" in line and "--ipc=host" in line
    assert "IMAGEKIT_SHM_CHECK=0 silences this line" in line
    assert "\n" not in line


def test_only_the_main_process_warns_about_shm_and_its_children_do_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(imagekit_site.SHM_SWITCH, raising=False)
    monkeypatch.setattr(os, "statvfs", lambda _: os.statvfs_result((4096, 4096, 16384) + (0,) * 7))
    monkeypatch.setattr(os, "getppid", lambda: 4242)
    imagekit_site._check_shm()  # not the container's main process
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    imagekit_site._check_shm()
    assert capsys.readouterr().err == ""  # nothing yet: a Python that never imports torch
    (notice,) = [f for f in sys.meta_path if isinstance(f, imagekit_site._ShmNotice)]
    assert notice.find_spec("numpy") is None and capsys.readouterr().err == ""
    assert notice.find_spec("torch") is None  # the import itself goes on as usual
    assert "/dev/shm is 64 MiB" in capsys.readouterr().err
    assert notice not in sys.meta_path  # once
    assert os.environ[imagekit_site.SHM_SWITCH] == "0"  # its children stay quiet
    imagekit_site._check_shm()
    assert capsys.readouterr().err == ""


def test_enough_shm_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(imagekit_site.SHM_SWITCH, raising=False)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(os, "statvfs", lambda _: os.statvfs_result((4096, 4096, 524288) + (0,) * 7))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    imagekit_site._check_shm()
    assert capsys.readouterr().err == ""
    assert not [f for f in sys.meta_path if isinstance(f, imagekit_site._ShmNotice)]


def test_a_broken_environment_never_breaks_python_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_: str) -> None:
        raise RuntimeError("no /dev")

    monkeypatch.delenv(imagekit_site.SHM_SWITCH, raising=False)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(os, "statvfs", boom)
    imagekit_site.start()  # raises nothing
