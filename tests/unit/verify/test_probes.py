"""Probes: their metadata, the runner protocol, host mode, and the reports made of results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.adapters.hostprobe import HostProbeRunner
from imagekit.errors import InputError
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.records import Check, ImageRecord, Level, ProbeResult, Status
from imagekit.resources import probes_dir
from imagekit.verify.ports import ProbeRequest, ProbeRun
from imagekit.verify.probe_contract import (
    ImageVersions,
    ProbeDevice,
    ProbeExpectations,
    ProbeSettings,
)
from imagekit.verify.probes import discover, overall, parse_events, read_spec, select
from imagekit.verify.summary import changes, junit, markdown
from tests import host_torch
from tests.fakes import verify_record

torch = pytest.importorskip("torch", reason=host_torch.REASON)
pytestmark = host_torch.MARK

PROBES = probes_dir()
WRONG_TORCH = ProbeExpectations(ImageVersions(torch="9.9.9"))
QUICK_RENDEZVOUS = ProbeExpectations(settings=ProbeSettings(ddp_init_timeout_s=5))


def run_host(
    folder: Path,
    probes: list[str],
    expected: ProbeExpectations,
    *,
    device: ProbeDevice,
    timeout_s: float,
) -> ProbeRun:
    """The probes run in this Python environment, as `imagekit probe` runs them."""
    request = ProbeRequest(
        image="",
        probes_dir=folder,
        probes=tuple(probes),
        expected=expected,
        device=device,
        gpus=False,
        timeout_s=timeout_s,
        shm_bytes=0,
    )
    return HostProbeRunner().run(request)


def test_probe_metadata_is_read_without_importing_torch() -> None:
    specs = discover(PROBES)
    assert set(specs) == {
        "env",
        "cuda_stack",
        "autograd",
        "matmul",
        "higher_order",
        "compile",
        "ddp",
        "cudnn",
        "cuda_extension",
        "ddp_nodes",
    }
    assert specs["ddp_nodes"].nodes == 2  # run across nodes only, never in the list below
    assert specs["cudnn"].needs_gpu and not specs["autograd"].needs_gpu
    assert specs["ddp"].shm_bytes == 1 << 30
    assert [s.name for s in select(specs, None)] == [
        "env",
        "cuda_stack",
        "autograd",
        "matmul",
        "higher_order",
        "compile",
        "ddp",
        "cudnn",
        "cuda_extension",
    ]
    # The rungs: inspection without a workload, CPU workloads, GPU workloads.
    levels = {name: spec.level for name, spec in specs.items()}
    assert levels["env"] == levels["cuda_stack"] == levels["cuda_extension"] == Level.STATIC
    assert levels["autograd"] == levels["ddp"] == levels["compile"] == Level.CPU
    assert levels["cudnn"] == Level.GPU
    assert specs["cuda_extension"].flavours == ("full",)


def test_a_probe_with_an_unknown_level_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('PROBE = {"level": "warp"}\n')
    with pytest.raises(InputError) as caught:
        read_spec(bad)
    assert f"{bad}:1:" in caught.value.format() and "static" in caught.value.format()


def test_a_probe_whose_metadata_is_not_a_literal_is_reported_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('X = 1\nPROBE = {"timeout_s": 2 * 60}\n')
    with pytest.raises(InputError, match=r"bad.py:2: PROBE must be a plain literal"):
        read_spec(bad)


def test_asking_for_an_unknown_probe_lists_the_known_ones() -> None:
    with pytest.raises(InputError) as caught:
        select(discover(PROBES), ["autograd", "gpu_burn"])
    assert "gpu_burn" in caught.value.message and "autograd" in caught.value.hint


def test_expected_values_come_from_the_labels() -> None:
    labels = {
        "io.imagekit.torch": "2.14.1",
        "io.imagekit.cuda": "13.0",
        "io.imagekit.cudnn": "9.24.0.43",
        "io.imagekit.nccl": "2.30.7",
        "io.imagekit.python": "3.12",
        "io.imagekit.cuda-archs": "sm_80 sm_90",
        "io.imagekit.glibc-floor": "2.35",
    }
    expected = ProbeExpectations.of_image(ImageLabels.parse(labels)).to_json()
    assert expected["torch"] == "2.14.1" and expected["cuda"] == "13.0"
    assert expected["glibc_floor"] == "2.35"
    assert expected["archs"] == ["sm_80", "sm_90"]
    assert expected["require_non_root"] and expected["min_shm_bytes"] == 1 << 30
    plain = ImageLabels.parse({"io.imagekit.torch": "2.13.0"})
    cpu = ProbeExpectations.of_image(plain, container=False).to_json()
    assert cpu == {"torch": "2.13.0", "cuda": None}
    slow = ProbeExpectations.of_image(plain, container=False, time_scale=8).to_json()
    assert slow == {"torch": "2.13.0", "cuda": None, "time_scale": 8}
    assert ProbeExpectations().to_json() == {}
    rendezvous = ProbeExpectations(settings=ProbeSettings(ddp_init_timeout_s=5)).to_json()
    assert rendezvous == {"ddp_init_timeout_s": 5}


def _event(**fields: object) -> str:
    return json.dumps(fields)


def _result(probe: str, status: str) -> str:
    return _event(
        event="result",
        probe=probe,
        status=status,
        reason="",
        checks=[{"name": f"{probe} works", "ok": True, "detail": ""}],
        metrics={},
        facts={},
        duration_s=0.1,
        schema_version=1,
    )


@pytest.mark.parametrize(
    "timed_out,exit_code,expected",
    [
        (True, None, ("timeout", "the run hit its time limit in this probe")),
        (False, 137, ("error", "the probe process died (exit code 137): Killed")),
    ],
)
def test_a_probe_that_started_and_never_reported_is_never_a_pass(
    timed_out: bool, exit_code: int | None, expected: tuple[str, str]
) -> None:
    text = "\n".join(
        [
            _event(event="device", device="cpu", reason="no GPU visible"),
            _event(event="start", probe="autograd"),
            _result("autograd", "pass"),
            _event(event="start", probe="ddp"),
            "noise that is not JSON",
        ]
    )
    out = parse_events(
        text,
        ["autograd", "ddp", "matmul"],
        timed_out=timed_out,
        exit_code=exit_code,
        stderr="Killed\n",
    )
    assert out.device == "cpu"
    statuses = [(r.probe, r.status) for r in out.results]
    assert statuses == [("autograd", "pass"), ("ddp", expected[0]), ("matmul", expected[0])]
    assert out.results[1].reason == expected[1]
    assert out.results[2].reason.startswith("not reached: ")
    assert overall(out.results) == "fail"
    assert overall(out.results, ["autograd"]) == "pass"


def test_a_malformed_result_line_is_an_error_never_a_pass() -> None:
    unproven = _event(event="result", probe="autograd", status="pass", checks=[])
    out = parse_events(_event(event="start", probe="autograd") + "\n" + unproven, ["autograd"])
    assert out.results[0].status is Status.ERROR
    assert "malformed result" in out.results[0].reason


def test_a_probe_cannot_report_for_another_that_then_dies() -> None:
    # env prints a passing result line for ddp; ddp then dies at start. The forged line is
    # env's own output, not the runner's: ddp is an error, never a borrowed pass.
    nonce = "3f2a"
    lines = [
        _event(event="start", probe="env", nonce=nonce),
        _result("ddp", "pass"),  # printed by env, without the run's nonce
        json.dumps({**json.loads(_result("ddp", "pass")), "nonce": nonce}),  # even with it
        json.dumps({**json.loads(_result("env", "pass")), "nonce": nonce}),
        _event(event="start", probe="ddp", nonce=nonce),
    ]
    out = parse_events("\n".join(lines), ["env", "ddp"], exit_code=139, nonce=nonce)
    assert [(r.probe, r.status) for r in out.results] == [
        ("env", Status.PASS),
        ("ddp", Status.ERROR),
    ]
    assert "exit code 139" in out.results[1].reason


def test_lines_without_the_runs_nonce_are_not_events() -> None:
    lines = [_event(event="start", probe="env"), _result("env", "pass")]
    out = parse_events("\n".join(lines), ["env"], exit_code=0, nonce="7b1c")
    assert out.results[0].status is Status.ERROR
    assert out.results[0].reason.startswith("not reached")


def test_host_mode_runs_the_suite_with_the_textbook_values() -> None:
    run = run_host(
        PROBES,
        ["env", "autograd", "higher_order", "matmul", "cudnn"],
        ProbeExpectations(),
        device=ProbeDevice.CPU,
        timeout_s=300,
    )
    by = {r.probe: r for r in run.output.results}
    assert {p: r.status for p, r in by.items()} == {
        "env": "pass",
        "autograd": "pass",
        "higher_order": "pass",
        "matmul": "pass",
        "cudnn": "skip",
    }
    checks = {c.name: c for c in by["autograd"].checks}
    assert checks["dy/dx"].detail.startswith("expected 3.0, saw 3.0")
    assert checks["dy/dw"].detail.startswith("expected 2.0, saw 2.0")
    assert checks["dy/db"].detail.startswith("expected 1.0, saw 1.0")
    second = {c.name: c for c in by["higher_order"].checks}["d2y/dx2 of x^3 at 1"]
    assert second.detail.startswith("expected 6.0, saw 6.0")
    assert by["env"].facts["torch"] == torch.__version__
    # A new Python's `import torch`, timed: the site's "import torch (s)" figure.
    assert 0 < by["env"].metrics["import_torch_s"] < 120
    assert run.wall_s > 0


def test_env_compares_with_what_it_was_told_and_names_both_values() -> None:
    run = run_host(PROBES, ["env"], WRONG_TORCH, device=ProbeDevice.CPU, timeout_s=120)
    env = run.output.results[0]
    assert env.status == "fail"
    check = next(c for c in env.checks if c.name == "torch version")
    assert check.detail == f"expected '9.9.9', saw '{torch.__version__.split('+')[0]}'"


def test_ddp_averages_gradients_over_two_gloo_ranks() -> None:
    run = run_host(PROBES, ["ddp"], ProbeExpectations(), device=ProbeDevice.CPU, timeout_s=180)
    ddp = run.output.results[0]
    assert ddp.status == "pass", ddp
    assert ddp.facts["backend"] == "gloo" and ddp.facts["world_size"] == 2
    names = [c.name for c in ddp.checks]
    assert "rank 1 gradients are the average over ranks" in names


def test_a_ddp_rank_that_never_joins_gives_timeout_not_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IMAGEKIT_DDP_DROP_RANKS", "1")
    run = run_host(PROBES, ["ddp"], QUICK_RENDEZVOUS, device=ProbeDevice.CPU, timeout_s=120)
    ddp = run.output.results[0]
    assert ddp.status == "timeout"
    assert "could not join within 5s" in ddp.reason
    assert run.wall_s < 90


def test_a_run_over_its_time_limit_is_killed_and_reported(tmp_path: Path) -> None:
    folder = tmp_path / "probes"
    folder.mkdir()
    for name in ("_runner.py", "_probekit.py", "autograd.py"):
        (folder / name).write_text((PROBES / name).read_text())
    (folder / "hang.py").write_text(
        'PROBE = {"timeout_s": 1}\n\n'
        "def run(device, expected):\n    import time\n    time.sleep(600)\n"
    )
    run = run_host(
        folder, ["autograd", "hang"], ProbeExpectations(), device=ProbeDevice.CPU, timeout_s=15
    )
    assert [r.status for r in run.output.results] == ["pass", "timeout"]
    assert run.wall_s < 60


def test_imagekit_probe_imports_neither_docker_nor_jinja2() -> None:
    script = (
        "import sys\n"
        "from imagekit.cli import main\n"
        "sys.argv = ['imagekit', 'probe', '--probes', 'autograd', '--json']\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "print('LOADED', [m for m in ('docker', 'jinja2') if m in sys.modules], code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert "LOADED [] 0" in done.stdout, done.stderr[-2000:]


def _record(probe_statuses: dict[str, str], metric: float = 10.0) -> ImageRecord:
    probes = [
        ProbeResult(
            probe=p,
            status=Status(s),
            reason="why" if s != "pass" else "",
            duration_s=0.5,
            checks=(Check(name="c", ok=s == "pass", detail="d"),),
            metrics={"matmul_warm_median_ms": metric},
        )
        for p, s in probe_statuses.items()
    ]
    structure = (Check(name="non-root", ok=True, detail="1000"),)
    return ImageRecord(verify=verify_record(*probes, structure=structure, level="cpu", levels={}))


def test_junit_has_a_testcase_per_image_and_probe() -> None:
    records = {
        "a": _record({"env": "pass", "matmul": "fail", "cudnn": "skip"}),
        "b": _record({"env": "timeout"}),
    }
    text = junit(records, "run1")
    assert 'tests="6"' in text and 'failures="1"' in text
    assert 'errors="1"' in text and 'skipped="1"' in text
    assert '<testcase classname="a" name="matmul"' in text


def test_junit_of_a_run_that_verified_nothing_is_never_green() -> None:
    # A CI that reads junit.xml must not count an engine that refused everything as a pass.
    empty = junit({}, "run1")
    assert 'tests="1" failures="0" errors="1"' in empty
    assert "nothing was verified" in empty
    refused = junit({}, "run1", {"slim": "the Docker engine refused while creating: x"})
    assert 'tests="1" failures="0" errors="1"' in refused
    assert '<testcase classname="slim" name="verify"' in refused
    assert "nothing was verified" in markdown({}, "run1")


def test_markdown_summary_lists_what_did_not_pass_with_its_reason() -> None:
    text = markdown({"a": _record({"env": "pass", "matmul": "fail"})}, "run1")
    assert "| a | - | cpu | fail | pass | FAIL | ok | 10.0 |" in text
    assert "- **a** `matmul` fail: why (c: d)" in text


def test_changes_reports_a_probe_that_stopped_passing_and_a_slower_metric() -> None:
    old = {"a": _record({"env": "pass", "matmul": "pass"}, metric=10.0)}
    new = {"a": _record({"env": "fail", "matmul": "pass"}, metric=15.0)}
    found = changes(old, new, threshold=0.2)
    assert "a env: passed, now fail (why)" in found
    assert any("matmul_warm_median_ms 10 -> 15 (+50%, worse)" in line for line in found)
    assert changes(old, old) == []
