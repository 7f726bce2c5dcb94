"""VerifyRun over the fakes: what verify records and decides, without an engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.build.render import RenderOptions, image_labels
from imagekit.errors import EngineError, EngineUnavailableError, GpuUnavailableError, InputError
from imagekit.events import EventKind
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.publish_records import Evidence
from imagekit.kernel.records import Check, Level, LevelState, ProbeResult, Status
from imagekit.kernel.runtime import EMULATION_SLOWDOWN, START_MARGIN_S, GpuChoice
from imagekit.kernel.vocabulary import EngineName
from imagekit.matrix.compat import load_compat
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.gate import decide
from imagekit.resources import probes_dir
from imagekit.verify.plan import GpuFallback
from imagekit.verify.ports import ProbeRequest, ProbeRun
from imagekit.verify.requests import VerifySettings
from imagekit.verify.run import VerifyRun
from imagekit.verify.settings import Target
from tests.fakes import (
    Events,
    FakeEngine,
    FakeInspector,
    FakeProbeRunner,
    ReadCountingFolder,
    image_id,
    passing,
    run_of,
    store,
)

ROOT = Path(__file__).resolve().parents[3]
CPU_FACTS = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"}


@pytest.fixture
def slim() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")


def make_run(
    tmp_path: Path,
    engine: FakeEngine,
    runner: FakeProbeRunner,
    inspector: FakeInspector | None = None,
    **settings: Any,
) -> tuple[VerifyRun, Events]:
    events = Events()
    verify = VerifyRun.of(
        engine,
        runner,
        inspector or FakeInspector(),
        store(tmp_path),
        VerifySettings(probes_dir=probes_dir(), **settings),
        events,
        load_compat(),
    )
    return verify, events


def built(engine: FakeEngine, plan: ImagePlan, **labels: str) -> str:
    """Put `plan`'s image in the engine with the labels render gives it (some overridden)."""
    rendered = {**image_labels(plan, RenderOptions()), **labels}
    return engine.add(plan.reference, image_id(plan.reference), rendered).id


def target(plan: ImagePlan) -> Target:
    return Target(plan.name, plan.reference, plan.required_probes)


def test_an_image_whose_probes_and_checks_pass_reaches_cpu_and_is_on_disk(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)
    runner = FakeProbeRunner(env_facts=CPU_FACTS)
    verify, events = make_run(tmp_path, engine, runner)
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "pass" and record.level == "cpu"
    assert record.levels == {
        Level.STATIC: LevelState.PASS,
        Level.CPU: LevelState.PASS,
        Level.GPU: LevelState.NOT_APPLICABLE,
    }
    # Read back from disk exactly as written.
    on_disk = verify.store.images()[slim.name].verify
    assert on_disk == record
    assert (verify.store.root / "junit.xml").is_file()
    assert (verify.store.root / "summary.md").read_text().count(slim.name) >= 1
    assert [e.kind for e in events.seen] == ["started", "finished"]
    # Slim has no cuda_extension (full only); the labels made the env probe's expectations.
    request = runner.requests[0]
    assert "cuda_extension" not in request.probes and "env" in request.probes
    versions = request.expected.versions
    assert versions.torch == "2.13.0" and versions.cuda is None
    assert versions.glibc_floor == slim.cell.glibc_floor
    assert request.labels["io.imagekit.run-id"] == verify.store.run_id


def test_a_hung_probe_is_a_timeout_and_fails_the_image_with_its_record_kept(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)

    def hang(request: ProbeRequest) -> ProbeRun:
        results = [passing("env", CPU_FACTS), passing("autograd")]
        results += [
            ProbeResult.synthetic(p, Status.TIMEOUT, "the run hit its time limit")
            for p in request.probes[2:]
        ]
        return run_of(tuple(results), timed_out=True, exit_code=None)

    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(script=hang), timeout_s=7)
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "fail" and record.level == "static"
    assert record.timings.timed_out and record.timings.timeout_s == 7
    assert verify.store.read_image(slim.name) is not None


def test_a_crashed_probe_is_an_error_never_a_borrowed_pass(tmp_path: Path, slim: ImagePlan) -> None:
    engine = FakeEngine()
    built(engine, slim)

    def crash(request: ProbeRequest) -> ProbeRun:
        results = tuple(
            ProbeResult.synthetic(p, Status.ERROR, "the probe process died (exit code 139)")
            if p == "ddp"
            else passing(p, CPU_FACTS if p == "env" else None)
            for p in request.probes
        )
        return run_of(results, exit_code=139)

    verify, events = make_run(tmp_path, engine, FakeProbeRunner(script=crash))
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "fail"
    ddp = record.result("ddp")
    assert ddp is not None and ddp.status is Status.ERROR
    assert "ddp" in events.seen[-1].message


def test_a_label_that_lies_about_torch_fails_the_static_level(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)
    facts = {**CPU_FACTS, "torch": "2.12.1+cpu"}
    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(env_facts=facts))
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "fail" and record.level == "none"
    lying = [c for c in record.structure if not c.ok]
    assert [c.name for c in lying] == ["torch label agrees with the image"]
    assert lying[0].detail == "label says torch 2.13.0, the image has 2.12.1"


def test_cuda_labels_on_a_cpu_image_fail_verification(tmp_path: Path, slim: ImagePlan) -> None:
    engine = FakeEngine()
    built(engine, slim, **{"io.imagekit.cuda": "13.0"})
    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(env_facts=CPU_FACTS))
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "fail"
    assert any(not c.ok for c in record.structure)  # the image reports no CUDA


def test_a_failing_structure_check_fails_the_image(tmp_path: Path, slim: ImagePlan) -> None:
    engine = FakeEngine()
    built(engine, slim)
    inspector = FakeInspector(failing=("no pip cache",))
    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(env_facts=CPU_FACTS), inspector)
    record = verify.execute([target(slim)])[slim.name]
    assert record.status == "fail"
    assert Check(name="no pip cache", ok=False, detail="seen") in record.structure
    assert inspector.seen[0][1]["io.imagekit.image"] == slim.name


def test_without_structure_checks_the_inspector_is_not_asked(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)
    inspector = FakeInspector()
    verify, _ = make_run(
        tmp_path, engine, FakeProbeRunner(env_facts=CPU_FACTS), inspector, structure=False
    )
    verify.execute([target(slim)])
    assert inspector.seen == []


def test_the_reports_are_made_from_the_records_held_never_read_back_and_say_the_same(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    from imagekit.verify.summary import junit, markdown

    engine = FakeEngine()
    built(engine, slim)
    built(engine, full)
    folder = store(tmp_path)
    counting = ReadCountingFolder(folder.root, folder.run_id)
    verify = VerifyRun.of(
        engine,
        FakeProbeRunner(env_facts=CPU_FACTS),
        FakeInspector(failing=("no pip cache",)),
        counting,
        VerifySettings(probes_dir=probes_dir()),
        Events(),
        load_compat(),
    )
    verify.execute([target(slim), target(full), Target("gone", "imagekit-demo/pytorch:gone")])
    assert counting.image_reads == []  # written three times (two images and the end), never read
    # What was written from memory is what the records on disk make.
    on_disk = counting.images()
    assert set(on_disk) == {slim.name, full.name}
    run_id, errors = counting.run_id, verify.errors
    assert (counting.root / "summary.md").read_text() == markdown(on_disk, run_id, errors)
    assert (counting.root / "junit.xml").read_text() == junit(on_disk, run_id, errors)


def test_gpus_auto_falls_back_to_the_cpu_when_the_engine_refuses_them(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine(runtimes=("nvidia", "runc"))
    built(engine, slim)
    runner = FakeProbeRunner(env_facts=CPU_FACTS, gpus_refused=True)
    verify, _ = make_run(tmp_path, engine, runner)
    assert verify.gpus
    record = verify.execute([target(slim)])[slim.name]
    assert [r.gpus for r in runner.requests] == [True, False]
    assert record.device == "cpu" and record.status == "pass"


def test_after_a_gpu_refusal_gpus_auto_runs_every_later_image_on_the_cpu_and_says_so(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    import io

    from imagekit.adapters.progress import PlainView

    engine = FakeEngine(runtimes=("nvidia", "runc"))
    built(engine, slim)
    built(engine, full)
    runner = FakeProbeRunner(env_facts=CPU_FACTS, gpus_refused=True)
    verify, events = make_run(tmp_path, engine, runner, nodes=2)
    assert verify.plan.fallback is GpuFallback.CPU
    records = verify.execute([target(slim), target(full)])
    # The first image asked, was refused and ran again on the CPU; the second never asked.
    assert [(r.image, r.gpus) for r in runner.requests] == [
        (records[slim.name].image_id, True),
        (records[slim.name].image_id, False),
        (records[full.name].image_id, False),
    ]
    assert [r.gpus for r in runner.node_requests] == [False, False]
    assert [r.device for r in records.values()] == ["cpu", "cpu"] and not verify.gpus
    [fallback] = [e for e in events.seen if e.kind is EventKind.STEP]
    assert fallback.image == slim.name
    assert fallback.message == (
        "no GPUs for the image: could not select device driver; --gpus auto: this image and "
        "every later one run on the CPU (their GPU probes skip; --gpus all makes this an error)"
    )
    # The person sees it as a line of the run's progress, as the CLI shows every event.
    shown = io.StringIO()
    view = PlainView(shown, github=False)
    for event in events.seen:
        view(event)
    lines = shown.getvalue().splitlines()
    assert any(
        line.startswith(f"{slim.name}: [") and "every later one run on the CPU" in line
        for line in lines
    )


def test_gpus_all_never_falls_back_each_image_asks_and_is_not_verified(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    engine = FakeEngine(runtimes=("nvidia", "runc"))
    built(engine, slim)
    built(engine, full)
    runner = FakeProbeRunner(env_facts=CPU_FACTS, gpus_refused=True)
    verify, events = make_run(tmp_path, engine, runner, gpus=GpuChoice.ALL)
    assert verify.plan.fallback is GpuFallback.NONE
    assert verify.execute([target(slim), target(full)]) == {}
    assert [r.gpus for r in runner.requests] == [True, True]
    assert [type(e) for e in verify.failures] == [GpuUnavailableError, GpuUnavailableError]
    assert not any(e.kind is EventKind.STEP for e in events.seen) and verify.gpus


def test_gpus_all_on_an_engine_that_refuses_them_is_an_engine_error(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)
    runner = FakeProbeRunner(gpus_refused=True)
    verify, _ = make_run(tmp_path, engine, runner, gpus=GpuChoice.ALL)
    assert verify.execute([target(slim)]) == {}
    assert [type(e) for e in verify.failures] == [GpuUnavailableError]
    junit = (verify.store.root / "junit.xml").read_text()  # the reports cover what happened
    assert 'errors="1"' in junit and "could not select device driver" in junit


@pytest.fixture
def full() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "full")


def test_an_engine_refusal_for_one_image_is_recorded_and_the_next_image_is_verified(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    engine = FakeEngine()
    refused = built(engine, slim)
    built(engine, full)

    def script(request: ProbeRequest) -> ProbeRun:
        if request.image == refused:
            raise EngineError("the Docker engine refused while creating a probe container: x")
        return run_of(tuple(passing(p, CPU_FACTS if p == "env" else None) for p in request.probes))

    verify, events = make_run(tmp_path, engine, FakeProbeRunner(script=script))
    records = verify.execute([target(slim), target(full)])
    assert list(records) == [full.name] and records[full.name].status == "pass"
    assert list(verify.errors) == [slim.name] and "refused" in verify.errors[slim.name]
    junit = (verify.store.root / "junit.xml").read_text()
    assert 'errors="1"' in junit and f'classname="{slim.name}" name="verify"' in junit
    summary = (verify.store.root / "summary.md").read_text()
    assert f"**{slim.name}** not verified" in summary
    assert any("not verified" in e.message for e in events.seen)


def test_an_engine_that_stops_answering_ends_the_run_and_names_the_images_not_reached(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, slim)
    built(engine, full)

    def script(request: ProbeRequest) -> ProbeRun:
        raise EngineUnavailableError("no Docker engine answers at unix:///x while creating")

    runner = FakeProbeRunner(script=script)
    verify, _ = make_run(tmp_path, engine, runner)
    assert verify.execute([target(slim), target(full)]) == {}
    assert len(runner.requests) == 1  # the second image is not tried against a dead engine
    assert verify.errors[full.name] == "not reached: the engine stopped answering"
    assert 'tests="2" failures="0" errors="2"' in (verify.store.root / "junit.xml").read_text()


def test_a_missing_image_is_recorded_and_the_others_go_on(
    tmp_path: Path, slim: ImagePlan, full: ImagePlan
) -> None:
    engine = FakeEngine()
    built(engine, full)
    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(env_facts=CPU_FACTS))
    records = verify.execute([target(slim), target(full)])
    assert list(records) == [full.name]
    assert "is not in the engine" in verify.errors[slim.name]
    assert isinstance(verify.failures[0], InputError)


def test_an_image_the_engine_lacks_is_bad_input(tmp_path: Path, slim: ImagePlan) -> None:
    verify, _ = make_run(tmp_path, FakeEngine(), FakeProbeRunner())
    with pytest.raises(InputError, match="is not in the engine"):
        verify.verify_one(target(slim))


def test_the_time_limit_is_the_probes_own_plus_one_margin(tmp_path: Path, slim: ImagePlan) -> None:
    engine = FakeEngine()
    built(engine, slim)
    runner = FakeProbeRunner(env_facts=CPU_FACTS)
    verify, _ = make_run(tmp_path, engine, runner, probes=("env", "autograd"))
    verify.execute([target(slim)])
    limits = sum(verify.plan.specs[p].timeout_s for p in ("env", "autograd"))
    assert runner.requests[0].timeout_s == limits + START_MARGIN_S
    assert runner.requests[0].probes == ("env", "autograd")


@pytest.mark.parametrize(
    ("image_platform", "emulated"),
    [("linux/arm64", True), ("linux/arm64/v8", True), ("linux/amd64", False), ("", False)],
)
def test_an_image_of_another_architecture_is_verified_emulated_with_stretched_limits(
    tmp_path: Path, slim: ImagePlan, image_platform: str, emulated: bool
) -> None:
    engine = FakeEngine(facts=EngineInfo(server_version="fake", architecture="x86_64"))
    local = engine.add(
        slim.reference, image_id(slim.reference), image_labels(slim, RenderOptions())
    )
    engine.images[slim.reference] = replace(local, platform=image_platform)
    runner = FakeProbeRunner(env_facts=CPU_FACTS)
    verify, _ = make_run(tmp_path, engine, runner, probes=("env", "autograd"))
    record = verify.execute([target(slim)])[slim.name]
    scale = EMULATION_SLOWDOWN if emulated else 1
    limits = sum(verify.plan.specs[p].timeout_s for p in ("env", "autograd"))
    assert runner.requests[0].timeout_s == (limits + START_MARGIN_S) * scale
    # The probes stretch their own limits (compile's child, ddp's rendezvous) by as much.
    assert runner.requests[0].expected.settings.time_scale == scale
    assert record.emulated is emulated and record.platform == image_platform
    assert record.timings.timeout_s == (limits + START_MARGIN_S) * scale
    # Emulated, the probes run on the CPU the arm64 images are for (Grace's ISA), not qemu's
    # `max`, and the record says which.
    cpu = "neoverse-n2" if emulated else ""
    assert runner.requests[0].environment == ({"QEMU_CPU": cpu} if emulated else {})
    assert record.emulated_cpu == cpu


@pytest.mark.parametrize("timeout", ["0", "-5"])
def test_a_time_limit_that_is_not_positive_is_refused_before_any_engine_call(
    timeout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from imagekit.cli import app

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for command in (["verify", "some/image:tag"], ["probe"]):
        result = CliRunner().invoke(app, [*command, "--timeout-s", timeout])
        assert result.exit_code == 2, result.output
        assert "--timeout-s" in result.output and "not a time limit" in result.output


class _LeftoverApi:
    """The two listing calls `leftovers` makes, answering with one stray probe container."""

    def containers(self, all: bool, filters: dict[str, str]) -> list[dict[str, object]]:
        if filters["label"] == "io.imagekit.run-id":
            return [{"Id": "c" * 64, "Names": ["/stray"], "Created": 1.0}]
        return []

    def images(self, filters: dict[str, object]) -> list[dict[str, object]]:
        return []


def test_containers_left_by_other_runs_are_named_with_how_to_remove_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from types import SimpleNamespace

    from imagekit.adapters.engine import DockerEngine
    from imagekit.cli.common import note_leftovers

    note_leftovers(DockerEngine(SimpleNamespace(api=_LeftoverApi())))  # type: ignore[arg-type]
    assert "1 containers of other imagekit runs" in capsys.readouterr().err
    api = SimpleNamespace(containers=lambda **_: [], images=lambda **_: [])
    note_leftovers(DockerEngine(SimpleNamespace(api=api)))  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""


def test_an_engine_that_dies_mid_run_keeps_every_finished_record(
    tmp_path: Path, slim: ImagePlan
) -> None:
    from imagekit.errors import EngineUnavailableError

    engine = FakeEngine()
    built(engine, slim)
    other = engine.add(
        "imagekit-demo/pytorch:other", image_id("other"), dict(engine.images[slim.reference].labels)
    )
    calls: list[str] = []

    def dies_second(request: ProbeRequest) -> ProbeRun:
        calls.append(request.image)
        if len(calls) == 2:
            raise EngineUnavailableError("no Docker engine answers at the default socket")
        results = tuple(passing(p, CPU_FACTS if p == "env" else None) for p in request.probes)
        return run_of(results)

    verify, _ = make_run(tmp_path, engine, FakeProbeRunner(script=dies_second))
    records = verify.execute([target(slim), Target("other", other.tags[0])])
    assert list(records) == [slim.name] and [type(e) for e in verify.failures] == [
        EngineUnavailableError
    ]
    assert set(verify.store.images()) == {slim.name}
    assert 'tests="' in (verify.store.root / "junit.xml").read_text()


@pytest.mark.parametrize("command", [["verify", "some/image:tag"], ["build"], ["publish"]])
@pytest.mark.parametrize("what", ["a file", "read-only"])
def test_a_results_folder_that_cannot_be_written_is_bad_input_before_any_engine_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], what: str
) -> None:
    import os

    from typer.testing import CliRunner

    from imagekit.cli import app

    if what == "a file":
        results = tmp_path / "results.txt"
        results.write_text("not a folder\n")
    else:
        # Root writes into read-only folders, so the engine's answer is played: no access.
        results = tmp_path / "ro" / "results"
        results.parent.mkdir(mode=0o555)
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, m: False if Path(p) == results.parent else real_access(p, m)
        )
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    matrix = ["--matrix", str(Path(__file__).resolve().parents[3] / "examples" / "cpu.yaml")]
    extra = [] if command[0] == "verify" else matrix
    result = CliRunner().invoke(app, [*command, *extra, "--results", str(results)])
    assert result.exit_code == 2, result.output
    assert "--results" in result.output and "Traceback" not in result.output


def test_a_truncated_record_given_to_report_is_one_line_naming_the_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from imagekit.cli import app

    run = store(tmp_path)
    run.image_file("a-slim").write_text('{"verify": {"image_id": "sha256:')
    result = CliRunner().invoke(app, ["report", str(run.root)])
    assert result.exit_code == 2, result.output
    assert "a-slim.json is not an imagekit record" in result.output
    assert "Traceback" not in result.output


def test_a_container_that_ends_just_as_it_runs_over_is_a_timeout_not_an_engine_error() -> None:
    import docker.errors
    import requests.exceptions

    from imagekit.adapters.containers import ContainerProbeRunner

    class EndedAtTheLimit:
        """Runs over, then has already exited when it is killed (the engine answers 409)."""

        waits = 0

        def wait(self, timeout: float) -> dict[str, int]:
            self.waits += 1
            if self.waits == 1:
                raise requests.exceptions.ReadTimeout("ran over")
            return {"StatusCode": 0}

        def kill(self) -> None:
            raise docker.errors.APIError("409 Client Error: Container ... is not running")

    assert ContainerProbeRunner._wait(EndedAtTheLimit(), 1.0) == (None, True)  # type: ignore[arg-type]


def test_gpus_all_on_an_engine_that_would_drop_the_request_is_refused_before_any_probe(
    tmp_path: Path, slim: ImagePlan
) -> None:
    from imagekit.kernel.engine import EngineInfo

    podman = EngineInfo(
        name=EngineName.PODMAN, server_version="4.3.1", cdi_devices=("nvidia.com/gpu=all",)
    )
    engine = FakeEngine(facts=podman)
    built(engine, slim)
    runner = FakeProbeRunner()
    with pytest.raises(GpuUnavailableError, match="would start the probes without GPUs"):
        make_run(tmp_path, engine, runner, gpus=GpuChoice.ALL)
    verify, _ = make_run(tmp_path, engine, runner, gpus=GpuChoice.AUTO)
    assert verify.notes() == [
        "the host has CDI devices, but Podman 4.3.1's Docker API drops device requests "
        "(Podman 5.4+ passes them): running CPU probes only (GPU probes skip)"
    ]
    assert runner.requests == []


def test_the_summary_goes_to_github_s_step_summary_only_when_one_is_given(
    tmp_path: Path, slim: ImagePlan
) -> None:
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("an earlier step's summary\n")
    engine = FakeEngine()
    built(engine, slim)
    runner = FakeProbeRunner(env_facts=CPU_FACTS)
    verify, _ = make_run(tmp_path / "a", engine, runner)
    verify.execute([target(slim)], step_summary)
    summary = (verify.store.root / "summary.md").read_text()
    assert step_summary.read_text() == "an earlier step's summary\n" + summary
    # Without one, nothing outside the run folder is written; the log is the run's.
    verify, _ = make_run(tmp_path / "b", engine, FakeProbeRunner(env_facts=CPU_FACTS))
    verify.execute([target(slim)])
    assert step_summary.read_text() == "an earlier step's summary\n" + summary
    assert verify.store.log_file(slim.name, "verify").is_file()


# verify IMAGE (no matrix): what the image requires travels in its labels ---------------------


def by_name(plan: ImagePlan) -> Target:
    """An image named on the command line, as `imagekit verify IMAGE` makes its target."""
    return Target(plan.name, plan.reference)


def every_probe_and_a_gpu_one(request: ProbeRequest) -> ProbeRun:
    """Every CPU probe passes; the GPU probe of the folder (cudnn) is skipped off a GPU."""
    ran = [passing(p, CPU_FACTS if p == "env" else None) for p in request.probes if p != "cudnn"]
    results = (*ran, ProbeResult.synthetic("cudnn", Status.SKIP, "no GPU"))
    return run_of(results, device=request.device)


def test_verify_by_name_counts_the_probes_the_image_labels_require_and_the_gate_agrees(
    tmp_path: Path, slim: ImagePlan
) -> None:
    engine = FakeEngine()
    made = built(engine, slim)
    runner = FakeProbeRunner(script=every_probe_and_a_gpu_one)
    verify, _ = make_run(tmp_path, engine, runner)
    record = verify.execute([by_name(slim)])[slim.name]
    assert record.required_probes == slim.required_probes
    assert record.status == "pass" and Level.GPU not in record.required_levels
    evidence = Evidence(verify.store.run_id, slim.name, record)
    decision = decide(slim, made, [evidence])
    assert decision.allowed, decision.reasons


def test_an_image_without_the_label_counts_every_probe_but_never_the_level_it_cannot_have(
    tmp_path: Path, slim: ImagePlan
) -> None:
    """An image from before the label: every probe that ran counts (the skipped GPU one too,
    so verify fails it), and the gpu level, n/a on a CPU image, is not among those required."""
    engine = FakeEngine()
    made = built(engine, slim, **{"io.imagekit.required-probes": ""})
    runner = FakeProbeRunner()
    verify, _ = make_run(tmp_path, engine, runner)
    record = verify.execute([by_name(slim)])[slim.name]
    assert set(record.required_probes) == set(runner.requests[0].probes)
    assert record.status == "pass"
    assert record.levels[Level.GPU] is LevelState.NOT_APPLICABLE
    assert Level.GPU not in record.required_levels
    assert decide(slim, made, [Evidence("r1", slim.name, record)]).allowed


def test_verify_by_name_with_probes_named_counts_exactly_those(
    tmp_path: Path, slim: ImagePlan
) -> None:
    """`verify IMAGE --probes autograd,hang`: what was asked for is what must pass."""
    engine = FakeEngine()
    built(engine, slim)

    def autograd_fails(request: ProbeRequest) -> ProbeRun:
        failed = ProbeResult.synthetic("autograd", Status.FAIL, "wrong gradient")
        return run_of((passing("env", CPU_FACTS), failed), device=request.device)

    runner = FakeProbeRunner(script=autograd_fails)
    verify, _ = make_run(tmp_path, engine, runner, probes=("env", "autograd"))
    record = verify.execute([by_name(slim)])[slim.name]
    assert record.required_probes == ("env", "autograd")
    assert record.status == "fail"


def test_the_constructor_keeps_what_it_is_given_and_reaches_nothing(tmp_path: Path) -> None:
    """The probes folder and the engine's facts are read by `VerifyRun.of`; made from a plan,
    a run touches no port until it runs (here: a store whose folder does not exist)."""
    from imagekit.adapters.results import RunFolder
    from imagekit.verify.plan import VerifyPlan

    settings = VerifySettings(probes_dir=tmp_path / "no-probes-here", gpus=GpuChoice.ALL)
    podman = EngineInfo(name=EngineName.PODMAN, server_version="4.3.1")
    plan = VerifyPlan(settings, {}, gpus=True, fallback=GpuFallback.NONE, engine_architecture=None)
    nowhere = RunFolder(tmp_path / "nowhere", "run")
    verify = VerifyRun(
        plan,
        FakeEngine(facts=podman),
        FakeProbeRunner(),
        FakeInspector(),
        nowhere,
        Events(),
        load_compat(),
    )
    assert verify.gpus and verify.records == {} and not (tmp_path / "nowhere").exists()
