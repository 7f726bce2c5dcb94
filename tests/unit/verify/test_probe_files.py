"""The probe files agree with the host: statuses, names from file names, the runner's output.

None of these needs torch: the probes' shared module is loaded by path, the metadata is read
with `ast`, and the runner is driven with a stdlib-only probe.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from imagekit.kernel.records import Status
from imagekit.verify.probes import discover

# The repo's own probes folder: the files these tests are about.
PROBES = Path(__file__).resolve().parents[3] / "probes"


def _load_probekit() -> ModuleType:
    """`probes/_probekit.py` by path: the probes folder is not a package."""
    spec = importlib.util.spec_from_file_location("probekit_under_test", PROBES / "_probekit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _probe_literal(path: Path) -> dict[str, object]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PROBE" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict), path
            return value
    raise AssertionError(f"{path} has no PROBE literal")


def _probe_files() -> list[Path]:
    return sorted(p for p in PROBES.glob("*.py") if not p.name.startswith("_"))


def test_the_probes_statuses_and_exit_codes_are_the_hosts_statuses() -> None:
    probekit = _load_probekit()
    host = [s.value for s in Status]
    assert list(probekit.STATUSES) == host
    assert list(probekit.EXIT_CODES) == host
    assert probekit.EXIT_CODES["pass"] == probekit.EXIT_CODES["skip"] == 0


def test_a_probe_is_named_by_its_file_and_nowhere_else() -> None:
    files = _probe_files()
    assert files, f"no probes in {PROBES}"
    for path in files:
        literal = _probe_literal(path)
        assert "name" not in literal, f"{path.name}: the name comes from the file name"
        text = path.read_text(encoding="utf-8")
        for quoted in (f'"{path.stem}"', f"'{path.stem}'"):
            assert quoted not in text, f"{path.name} spells its own name out: {quoted}"
    assert {name: spec.name for name, spec in discover(PROBES).items()} == {
        p.stem: p.stem for p in files
    }


TINY = '''"""A stdlib-only probe for the runner's tests."""

from _probekit import Recorder, main_for, probe_name

NAME = probe_name(__file__)
PROBE = {"needs_gpu": False, "timeout_s": 10}


def run(device, expected):
    rec = Recorder(NAME, device)
    rec.check("one is one", 1 == 1, "")
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
'''


def test_the_runner_reports_a_probe_under_its_file_name(tmp_path: Path) -> None:
    for name in ("_runner.py", "_probekit.py"):
        shutil.copy(PROBES / name, tmp_path / name)
    (tmp_path / "tiny.py").write_text(TINY, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "_runner.py"),
            "--device",
            "cpu",
            "--probes",
            "tiny,_probekit",
            "--expected",
            "{}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"] for e in events] == ["device", "start", "result", "start", "result"]
    assert events[0]["device"] == "cpu"
    tiny = events[2]
    assert tiny["probe"] == "tiny", tiny
    assert tiny["status"] == "pass" and tiny["device"] == "cpu"
    assert tiny["checks"] == [{"name": "one is one", "ok": True, "detail": ""}]
    # A file starting with `_` is not a probe: the runner says so instead of running it.
    assert events[4]["probe"] == "_probekit" and events[4]["status"] == "error"
    assert done.returncode == 2, done.stderr


def test_a_probe_run_as_a_script_reports_under_its_file_name(tmp_path: Path) -> None:
    shutil.copy(PROBES / "_probekit.py", tmp_path / "_probekit.py")
    (tmp_path / "tiny.py").write_text(TINY, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "tiny.py"), "cpu", "{}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["probe"] == "tiny" and report["status"] == "pass"


def test_cuda_stack_records_what_nccl_could_use_between_nodes_without_a_nic(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); "
        "from pathlib import Path; import cuda_stack; from _probekit import Recorder; "
        "plugin = Path(sys.argv[2]) / 'nvidia' / 'nccl' / 'lib' / 'libnccl-net-ofi.so'; "
        "plugin.parent.mkdir(parents=True); plugin.write_bytes(b'ELF'); "
        "facts = Recorder('cuda_stack', 'cpu'); "
        "cuda_stack.check_fabric(facts, Path(sys.argv[2]), {}.get); "
        "promised = Recorder('cuda_stack', 'cpu'); "
        "cuda_stack.check_fabric(promised, Path(sys.argv[2]), {'rdma': True}.get); "
        "print(json.dumps([facts.facts, facts.checks, promised.checks]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(PROBES), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""},
    )
    facts, checks, promised = json.loads(done.stdout)
    assert facts["nccl_net_plugins"] == [str(tmp_path / "nvidia/nccl/lib/libnccl-net-ofi.so")]
    assert facts["libibverbs"] == "loads" or facts["libibverbs"].startswith("absent")
    assert checks == []  # without a promise of RDMA it is a fact, not a check
    assert [c["name"] for c in promised] == ["NCCL can load libibverbs (InfiniBand/RoCE)"]
    assert promised[0]["ok"] == (facts["libibverbs"] == "loads")


def _run_in_probes(code: str) -> object:
    """Run `code` with the probes folder on sys.path (no torch needed); it prints JSON."""
    prelude = "import sys, json, types; sys.path.insert(0, sys.argv[1]); "
    done = subprocess.run(
        [sys.executable, "-c", prelude + code, str(PROBES)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_ddp_forks_gloo_ranks_only_while_cuda_is_not_initialised() -> None:
    # A GPU probe's autograd before ddp leaves device threads a forked rank cannot use.
    code = (
        "import ddp; cuda = lambda on: types.SimpleNamespace(cuda=types.SimpleNamespace("
        "is_initialized=lambda: on)); "
        "print(json.dumps([ddp.can_fork(cuda(False), 'gloo'), ddp.can_fork(cuda(True), 'gloo'), "
        "ddp.can_fork(cuda(False), 'nccl')]))"
    )
    assert _run_in_probes(code) == [True, False, False]


def test_cuda_stack_in_host_mode_compares_no_label_and_leaves_the_hosts_own_cudnn_alone() -> None:
    code = (
        "import cuda_stack; from _probekit import Recorder; "
        "torch = types.SimpleNamespace(version=types.SimpleNamespace(cuda='13.0')); "
        "host, image = Recorder('cuda_stack', 'cuda'), Recorder('cuda_stack', 'cuda'); "
        "ok_host = cuda_stack.check_cuda(host, torch, {}.get); "
        "ok_image = cuda_stack.check_cuda(image, torch, {'torch': '2.14.1', 'cuda': '12.8'}.get); "
        "print(json.dumps([ok_host, host.checks, ok_image, image.checks]))"
    )
    ok_host, host, ok_image, image = _run_in_probes(code)  # type: ignore[misc]
    assert ok_host is True and [c["name"] for c in host] == ["torch is built for a CUDA"]
    assert ok_image is True and image[0]["ok"] is False  # a mismatch fails; the checks go on
    assert image[0]["detail"] == "expected '12.8', saw '13.0'"
