"""The `compile` probe: torch.compile (inductor) checked as PyTorch's release smoke test does.

Its metadata, the image contract (`expected["torch_compile"]`) and how it reads a compiler's
failure need no torch. The host-mode runs do: each one compiles cold (about half a minute on
2 cores), and is skipped where torch is not installed, like the other host-mode tests. The
probe compiles in a child process of its own; these runs go through it too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from imagekit.adapters.hostprobe import HostProbeRunner
from imagekit.kernel.records import Level, Status
from imagekit.verify.ports import ProbeRequest, ProbeRun
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probes import read_spec
from tests.host_torch import needs_torch

PROBES = Path(__file__).resolve().parents[3] / "probes"
PROBE = PROBES / "compile.py"


def load_probe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`probes/compile.py` by path, with probes/ on sys.path for `_probekit` (as the runner
    has it); a name of its own, so it never stands in for anything importable as `compile`."""
    monkeypatch.syspath_prepend(str(PROBES))
    spec = importlib.util.spec_from_file_location("probe_compile_under_test", PROBE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_host(expected: ProbeExpectations, timeout_s: float = 300) -> ProbeRun:
    """The probe through the runner in this Python environment, as `imagekit probe` runs it."""
    request = ProbeRequest(
        image="",
        probes_dir=PROBES,
        probes=("compile",),
        expected=expected,
        device=ProbeDevice.CPU,
        gpus=False,
        timeout_s=timeout_s,
        shm_bytes=0,
    )
    return HostProbeRunner().run(request)


def inductor_folders(folder: Path) -> list[Path]:
    """The probe's cache folders left in `folder` (its temporary folder)."""
    return sorted(folder.glob("imagekit-inductor-*"))


def test_the_probe_is_a_cpu_level_probe_for_both_flavours() -> None:
    spec = read_spec(PROBE)
    assert spec.name == "compile"
    assert spec.level is Level.CPU and not spec.needs_gpu
    assert spec.flavours == ("slim", "full")
    assert spec.timeout_s >= 90  # cold compiles: about a third of it was measured on 2 cores


def test_an_image_that_says_it_cannot_compile_is_skipped_with_the_ways_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    probe = load_probe(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = probe.run("cpu", {"torch_compile": False})
    assert report["status"] == "skip" and report["probe"] == "compile"
    reason = report["reason"]
    assert "io.imagekit.torch-compile=no" in reason and "C++ compiler" in reason
    assert 'backend="aot_eager"' in reason and "full image" in reason
    assert report["checks"] == []
    assert inductor_folders(tmp_path) == []  # skipped at once: no cache folder was made


def test_a_compiler_error_is_named_by_its_innermost_cause_and_what_the_compiler_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = load_probe(monkeypatch)
    build = subprocess.CalledProcessError(
        1,
        ["/usr/bin/g++", "/tmp/x/header.hpp", "-I/usr/include/python3.11", "-o", "header.i"],
        output=b"/tmp/x/header.hpp:1:10: fatal error: Python.h: No such file or directory\n"
        b"compilation terminated.\n",
    )

    class InductorError(RuntimeError):
        def __init__(self, inner: BaseException) -> None:
            super().__init__(f"{type(inner).__name__}: {inner}\n\nSet TORCHDYNAMO_VERBOSE=1")
            self.inner_exception = inner

    try:
        raise RuntimeError("C++ compile error\n\nCommand:\ng++ ...") from build
    except RuntimeError as compile_error:
        wrapped = InductorError(compile_error)
    assert probe.describe(wrapped) == (
        "CalledProcessError: g++ exited with status 1: fatal error: Python.h: No such file or"
        " directory (raised as InductorError)"
    )
    assert probe.describe(ValueError("first line\nsecond")) == "ValueError: first line"


@needs_torch
def test_host_mode_compiles_and_matches_eager(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the runner's, so its leftovers are seen
    run = run_host(ProbeExpectations())
    (result,) = run.output.results
    assert result.status is Status.PASS, (result.reason, run.stderr[-2000:])
    names = {c.name for c in result.checks}
    for dtype in ("float16", "float32", "float64"):
        assert f"compiled sin(x)+cos(x) equals eager in {dtype}" in names
    assert "compiled module's forward equals eager" in names
    assert "gradient of 0.weight equals eager" in names
    assert "inductor found a vectorised ISA for this CPU" in names
    assert "max-autotune conv net equals eager (rtol 1e-2, atol 1e-2)" in names
    assert result.facts["backend"] == "inductor"
    assert result.facts["isa"] and result.facts["isa_bit_width"] >= 128
    assert result.facts["warm_speedup"] > 0
    for metric in ("first_compile_s", "max_autotune_compile_s", "compiled_warm_median_ms"):
        assert result.metrics[metric] > 0
    assert inductor_folders(tmp_path) == []  # its cache folder is gone


@needs_torch
def test_without_a_cxx_compiler_the_probe_fails_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Inductor takes its compiler from CXX (torch._inductor.config.cpp.cxx); one that is not
    # there is what an image without g++ looks like to it.
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.delenv("TORCH_INDUCTOR_INSTALL_GXX", raising=False)
    run = run_host(ProbeExpectations(), timeout_s=120)
    (result,) = run.output.results
    assert result.status is Status.FAIL, (result.reason, run.stderr[-2000:])
    (check,) = result.checks  # nothing after the first compile is attempted
    assert not check.ok and check.name == "a Linear-ReLU-Linear module compiles"
    assert check.detail.startswith("InvalidCxxCompiler: No working C++ compiler found")
    assert "/nonexistent/g++" in check.detail and "Traceback" not in check.detail


@needs_torch
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to wrap")
def test_without_pythons_headers_the_probe_names_the_missing_header(tmp_path: Path) -> None:
    # g++ without Python's include folder: an image without python3-dev.
    wrapper = tmp_path / "g++-no-python-h"
    wrapper.write_text(
        "#!/bin/bash\n"
        "args=()\n"
        'for a in "$@"; do case "$a" in -I*/include/python3*) ;; *) args+=("$a");; esac; done\n'
        f'exec {shutil.which("g++")} "${{args[@]}}"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    done = subprocess.run(
        [sys.executable, str(PROBE), "cpu", "{}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "CXX": str(wrapper)},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["status"] == "fail"
    (check,) = report["checks"]
    assert "fatal error: Python.h: No such file or directory" in check["detail"]


@needs_torch
def test_compiles_that_run_over_the_probes_own_limit_are_a_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    probe = load_probe(monkeypatch)
    monkeypatch.setitem(probe.PROBE, "timeout_s", 10.5)  # the child gets half a second
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = probe.run("cpu", {})
    assert report["status"] == "timeout" and "over 0.5s" in report["reason"], report
    assert inductor_folders(tmp_path) == []  # the cache folder goes even then
