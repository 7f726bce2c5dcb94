"""BuildRun: ordering, up-to-date checks, failures, budgets, records and events.

No engine: the shared `FakeEngine` holds the images, and a stand-in builder fills it when it
"builds", from a recorded legacy-builder stream.
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagekit.adapters.progress import PlainView
from imagekit.adapters.results import RunFolder
from imagekit.audit.ports import IndexState
from imagekit.audit.release import SecuritySuite
from imagekit.build.context import ContextInputs
from imagekit.build.outcome import budget_problem
from imagekit.build.ports import BuildOutcome, BuildRequest, LineSink
from imagekit.build.render import RenderOptions
from imagekit.build.requests import BuildSettings
from imagekit.build.run import BuildContexts, BuildRun
from imagekit.build.security import SecuritySource
from imagekit.build.stream import BuildLog
from imagekit.events import Event
from imagekit.kernel import labels as L
from imagekit.kernel.engine import Layer
from imagekit.kernel.records import BuildRecord, BuildStatus, ImageRecord
from imagekit.matrix.load import Matrix, load_matrix
from imagekit.matrix.plan import ImagePlan
from tests.fakes import OS_RELEASE, FakeEngine, FakeIndexes

BUILT, UP_TO_DATE = BuildStatus.BUILT, BuildStatus.UP_TO_DATE
FAILED, SKIPPED = BuildStatus.FAILED, BuildStatus.SKIPPED

ROOT = Path(__file__).resolve().parents[3]
CPU_BASE = "imagekit-base/debian:bookworm"
CPU_SLIM, CPU_FULL = "2.13.0-cpu-py3.11-slim", "2.13.0-cpu-py3.11-full"
UBUNTU_BASE = "ubuntu:24.04"
PIP_FAILURE = "The command '/bin/sh -c pip install -r requirements.txt' returned a non-zero code: 1"


@pytest.fixture(scope="module")
def cpu() -> list[ImagePlan]:
    return load_matrix(ROOT / "examples" / "cpu.yaml").plans


@pytest.fixture(scope="module")
def default() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


def torch_291(matrix: Matrix) -> list[ImagePlan]:
    """Three CUDA cells of torch 2.9.1, each slim and full (six images)."""
    return [p for p in matrix.plans if p.cell.torch == "2.9.1"]


# The engine and builder stand-ins ---------------------------------------------------


@pytest.fixture
def engine() -> FakeEngine:
    fake = FakeEngine()
    fake.add(CPU_BASE, "sha256:" + "b" * 64, size=80_000_000)
    fake.add(UBUNTU_BASE, "sha256:" + "c" * 64, size=78_000_000)
    return fake


def success_stream(request: BuildRequest, image_id: str) -> list[dict[str, Any]]:
    parent = request.build_args.get("BASE_IMAGE") or request.build_args["SLIM_IMAGE"]
    return [
        {"stream": f"Step 1/4 : FROM {parent}"},
        {"stream": "\n"},
        {"stream": " ---> 5f1a2b3c4d5e\nStep 2/4 : RUN true"},
        {"stream": "\n ---> Running in 0a1b2c3d4e5f\n"},
        # The same instruction twice in a row: still two steps.
        {"stream": "Step 3/4 : RUN true\n ---> Running in 1b2c3d4e5f60\n"},
        {"stream": "Step 4/4 : RUN pip install -r requirements.txt\n"},
        {"stream": "Successfully installed torch-2.13.0\n"},
        {"aux": {"ID": image_id}},
        {"stream": f"Successfully built {image_id[7:19]}\n"},
        {"stream": f"Successfully tagged {request.reference}\n"},
    ]


FAILURE_STREAM: list[dict[str, Any]] = [
    {"stream": "Step 1/2 : FROM ubuntu:24.04\n ---> 61b2756d6fa9\n"},
    {"stream": "Step 2/2 : RUN pip install -r requirements.txt\n"},
    {"stream": "ERROR: No matching distribution found for torch==9.9.9\n"},
    {"errorDetail": {"code": 1, "message": PIP_FAILURE}, "error": PIP_FAILURE},
]


class FakeBuilder:
    """Builds by replaying a recorded stream; what it builds lands in the fake engine."""

    name = "fake"

    def __init__(
        self,
        engine: FakeEngine,
        fail: Iterable[str] = (),
        sizes: dict[str, int] | None = None,
        silent_failures: Iterable[str] = (),
        seconds: float = 0.0,
    ) -> None:
        self.engine = engine
        self.fail = set(fail)
        self.silent_failures = set(silent_failures)
        self.sizes = sizes or {}
        self.seconds = seconds
        self.requests: list[BuildRequest] = []
        self.timeline: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    @property
    def built(self) -> list[str]:
        return [r.name for r in self.requests]

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        with self.lock:
            self.requests.append(request)
            self.timeline.append(("start", request.name))
        try:
            return self._build(request, on_line)
        finally:
            with self.lock:
                self.timeline.append(("end", request.name))

    def _build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        time.sleep(self.seconds)
        if request.name in self.silent_failures:
            return BuildOutcome(False, None)
        digest = hashlib.sha256(f"{request.reference} {request.labels}".encode()).hexdigest()
        image_id = f"sha256:{digest}"
        stream = FAILURE_STREAM if request.name in self.fail else success_stream(request, image_id)
        log = BuildLog()
        with request.log_path.open("w", encoding="utf-8") as handle:
            for item in stream:
                for line in log.feed(item) + ([] if item is not stream[-1] else log.close()):
                    handle.write(line + "\n")
                    on_line(log, line)
        if log.failed:
            return BuildOutcome(False, None, log.failure_message(), log)
        self.engine.add(
            request.reference, image_id, request.labels, self.sizes.get(request.name, 1)
        )
        self.engine.layers[image_id] = [
            Layer(f"RUN step {i}", size) for i, size in enumerate([10, 500, 0, 70, 3, 9000, 40])
        ]
        return BuildOutcome(True, image_id, "", log)


@dataclass
class Outcome:
    results: list[BuildRecord]
    events: list[Event]
    run: RunFolder

    def status(self) -> dict[str, str]:
        return {r.name: r.status for r in self.results}

    def by_name(self, name: str) -> BuildRecord:
        return next(r for r in self.results if r.name == name)

    def record(self, name: str) -> ImageRecord:
        record = self.run.read_image(name)
        assert record is not None, f"no record of {name}"
        return record

    def seen(self, name: str) -> list[tuple[str, str]]:
        return [(e.kind, e.message) for e in self.events if e.image == name]


def run_build(
    tmp_path: Path,
    builder: FakeBuilder,
    plans: list[ImagePlan],
    jobs: int = 1,
    fail_fast: bool = False,
    no_cache: bool = False,
    pull: bool = False,
) -> Outcome:
    settings = BuildSettings(jobs=jobs, fail_fast=fail_fast, no_cache=no_cache, pull=pull)
    contexts = BuildContexts(RenderOptions(), ContextInputs())
    run = RunFolder.create(tmp_path / "results")
    events: list[Event] = []
    results = BuildRun(
        builder.engine, builder, plans, settings, contexts, run, events.append
    ).execute()
    return Outcome(results, events, run)


# Order ------------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("reverse", [False, True], ids=["slim-first", "full-first"])
def test_slim_is_built_before_the_full_of_its_cell(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan], jobs: int, reverse: bool
) -> None:
    builder = FakeBuilder(engine, seconds=0.02)
    plans = list(reversed(cpu)) if reverse else cpu

    done = run_build(tmp_path, builder, plans, jobs=jobs)

    assert builder.timeline == [
        ("start", CPU_SLIM),
        ("end", CPU_SLIM),
        ("start", CPU_FULL),
        ("end", CPU_FULL),
    ]
    assert done.status() == {p.name: BUILT for p in plans}
    assert [r.name for r in done.results] == [p.name for p in plans]  # in the order asked


def test_with_many_jobs_each_full_still_waits_for_its_own_slim(
    tmp_path: Path, engine: FakeEngine, default: Matrix
) -> None:
    plans = [p for p in default.plans if p.cell.torch in ("2.8.0", "2.9.1")]
    builder = FakeBuilder(engine, seconds=0.01)

    done = run_build(tmp_path, builder, plans, jobs=4)

    assert set(done.status().values()) == {BUILT}
    for plan in plans:
        if plan.flavour == "full":
            slim = f"{plan.cell.id}-slim"
            assert builder.timeline.index(("end", slim)) < builder.timeline.index(
                ("start", plan.name)
            )


def test_full_is_built_from_the_slim_reference_of_its_cell(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    builder = FakeBuilder(engine)

    run_build(tmp_path, builder, cpu)

    slim, full = builder.requests
    assert slim.build_args == {"BASE_IMAGE": CPU_BASE}
    assert full.build_args == {"SLIM_IMAGE": slim.reference}
    # managed is the Dockerfile's own label (one LABEL step); the builder adds the hash.
    assert L.MANAGED not in slim.labels
    assert 'io.imagekit.managed="true"' in (slim.context_dir / "Dockerfile").read_text()
    assert slim.labels[L.INPUT_HASH].startswith("sha256:")


# Up to date ------------------------------------------------------------------------------


def test_second_run_over_the_same_inputs_is_up_to_date_and_builds_nothing(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    first = run_build(tmp_path, FakeBuilder(engine), cpu)
    builder = FakeBuilder(engine)

    second = run_build(tmp_path, builder, cpu)

    assert builder.requests == []
    assert second.status() == {CPU_SLIM: UP_TO_DATE, CPU_FULL: UP_TO_DATE}
    for before, after in zip(first.results, second.results, strict=True):
        assert after.message == "up to date"
        assert after.image_id == before.image_id
        assert after.input_hash == before.input_hash
        assert after.layer_count == 1
    assert [kind for kind, _ in second.seen(CPU_SLIM)] == ["finished"]


def test_no_cache_rebuilds_what_is_up_to_date(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    run_build(tmp_path, FakeBuilder(engine), cpu)
    builder = FakeBuilder(engine)

    again = run_build(tmp_path, builder, cpu, no_cache=True)

    assert builder.built == [CPU_SLIM, CPU_FULL]
    assert all(r.no_cache for r in builder.requests)
    assert again.status() == {CPU_SLIM: BUILT, CPU_FULL: BUILT}


def test_a_new_base_image_id_changes_the_input_hash_and_rebuilds_both_flavours(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    first = run_build(tmp_path, FakeBuilder(engine), cpu)
    engine.add(CPU_BASE, "sha256:" + "d" * 64)  # `imagekit base bootstrap` made a new one
    builder = FakeBuilder(engine)

    second = run_build(tmp_path, builder, cpu)

    assert builder.built == [CPU_SLIM, CPU_FULL]
    assert second.status() == {CPU_SLIM: BUILT, CPU_FULL: BUILT}
    for before, after in zip(first.results, second.results, strict=True):
        assert after.input_hash != before.input_hash
        assert after.image_id != before.image_id


def test_an_image_whose_label_does_not_match_is_rebuilt(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    slim = cpu[0]
    engine.add(slim.reference, "sha256:" + "e" * 64, {L.INPUT_HASH: "sha256:stale"})
    builder = FakeBuilder(engine)

    done = run_build(tmp_path, builder, [slim])

    assert builder.built == [CPU_SLIM]
    assert done.by_name(CPU_SLIM).status == BUILT


# Failures ------------------------------------------------------------------------------


def test_missing_base_image_fails_the_slim_with_a_bootstrap_hint_and_skips_its_full(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    del engine.images[CPU_BASE]
    builder = FakeBuilder(engine)

    done = run_build(tmp_path, builder, cpu)

    assert builder.requests == []
    slim, full = done.by_name(CPU_SLIM), done.by_name(CPU_FULL)
    assert slim.status == FAILED
    assert f"the base image {CPU_BASE} is not in the engine" in slim.message
    assert "`imagekit base bootstrap`" in slim.message
    assert full.status == SKIPPED
    assert full.message.startswith("not built: its slim image failed (the base image")


def test_full_alone_without_its_slim_image_says_to_build_the_slim_first(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    builder = FakeBuilder(engine)

    done = run_build(tmp_path, builder, [cpu[1]])

    (full,) = done.results
    assert full.status == FAILED
    assert "slim image of this cell" in full.message
    assert "build the slim flavour first" in full.message
    assert builder.requests == []


def test_failed_slim_skips_its_full_and_the_other_cells_still_build(
    tmp_path: Path, engine: FakeEngine, default: Matrix
) -> None:
    plans = torch_291(default)
    broken = "2.9.1-cu128-py3.12-slim"
    builder = FakeBuilder(engine, fail=[broken])

    done = run_build(tmp_path, builder, plans)

    assert done.status() == {
        "2.9.1-cu126-py3.12-slim": BUILT,
        "2.9.1-cu126-py3.12-full": BUILT,
        broken: FAILED,
        "2.9.1-cu128-py3.12-full": SKIPPED,
        "2.9.1-cu130-py3.12-slim": BUILT,
        "2.9.1-cu130-py3.12-full": BUILT,
    }
    assert "2.9.1-cu128-py3.12-full" not in builder.built
    failed = done.by_name(broken)
    assert failed.message.splitlines()[0] == PIP_FAILURE
    assert "ERROR: No matching distribution found for torch==9.9.9" in failed.message
    assert done.by_name("2.9.1-cu128-py3.12-full").message == (
        f"not built: its slim image failed ({PIP_FAILURE})"
    )


def test_slim_that_failed_without_a_message_still_skips_its_full(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    builder = FakeBuilder(engine, silent_failures=[CPU_SLIM])

    done = run_build(tmp_path, builder, cpu)

    assert done.status() == {CPU_SLIM: FAILED, CPU_FULL: SKIPPED}
    assert done.by_name(CPU_FULL).message.startswith("not built: its slim image failed")


def test_fail_fast_stops_scheduling_after_the_first_failure(
    tmp_path: Path, engine: FakeEngine, default: Matrix
) -> None:
    plans = torch_291(default)
    builder = FakeBuilder(engine, fail=["2.9.1-cu126-py3.12-slim"])

    done = run_build(tmp_path, builder, plans, fail_fast=True)

    assert builder.built == ["2.9.1-cu126-py3.12-slim"]
    assert [r.status for r in done.results] == [FAILED] + [SKIPPED] * 5
    assert {r.message for r in done.results[2:]} == {"not built: --fail-fast stopped the run"}
    for plan in plans:
        assert done.run.image_file(plan.name).is_file()


def test_without_fail_fast_a_failure_stops_nothing(
    tmp_path: Path, engine: FakeEngine, default: Matrix
) -> None:
    plans = torch_291(default)
    builder = FakeBuilder(engine, fail=["2.9.1-cu126-py3.12-slim"])

    run_build(tmp_path, builder, plans)

    assert len(builder.built) == 5  # all but the full of the broken slim


# Budgets --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size,budget,expected",
    [
        (999, 1000, None),
        (1000, 1000, None),
        (
            1_700_000_000,
            1_600_000_000,
            "over budget: 1,700,000,000 bytes (1.70 GB) > 1,600,000,000 bytes (1.60 GB)",
        ),
        (8_000_000_001, 8_000_000_000, "over budget: 8,000,000,001 bytes (8.00 GB) > "),
    ],
)
def test_budget_problem_names_both_sizes_only_when_over(
    size: int, budget: int, expected: str | None
) -> None:
    problem = budget_problem(size, budget)

    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(expected)


def test_over_budget_image_is_failed_with_both_numbers_and_its_full_skipped(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    builder = FakeBuilder(engine, sizes={CPU_SLIM: 1_700_000_000})

    done = run_build(tmp_path, builder, cpu)

    slim = done.by_name(CPU_SLIM)
    assert slim.status == FAILED
    assert "1,700,000,000 bytes" in slim.message
    assert "1,600,000,000 bytes" in slim.message
    assert slim.size_bytes == 1_700_000_000
    assert slim.size_budget_bytes == 1_600_000_000
    assert slim.image_id is not None  # built, measured, then refused
    assert done.by_name(CPU_FULL).status == SKIPPED


def test_up_to_date_image_that_is_over_budget_is_failed_too(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    run_build(tmp_path, FakeBuilder(engine, sizes={CPU_SLIM: 1_700_000_000}), cpu[:1])

    done = run_build(tmp_path, FakeBuilder(engine), cpu[:1])

    assert done.by_name(CPU_SLIM).status == FAILED
    assert done.by_name(CPU_SLIM).message.startswith("over budget")


# Records and events ---------------------------------------------------------------------


def test_every_finished_image_has_a_record_with_build_and_plan(
    tmp_path: Path, engine: FakeEngine, default: Matrix
) -> None:
    plans = torch_291(default)
    done = run_build(tmp_path, FakeBuilder(engine, fail=["2.9.1-cu128-py3.12-slim"]), plans)

    for result in done.results:
        record = done.record(result.name)
        assert sorted(record.to_json()) == ["build", "plan"]
        assert record.build is not None and record.plan is not None
        assert record.build.status == result.status
        assert record.build.message == result.message
        assert record.plan.name == result.name
        assert record.plan.reference == result.reference
        assert record.plan.cell["torch"] == "2.9.1"
    assert sorted(p.name for p in (done.run.root / "images").iterdir()) == sorted(
        f"{p.name}.json" for p in plans
    )


def test_built_image_record_has_its_measurements_and_log(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    done = run_build(tmp_path, FakeBuilder(engine, sizes={CPU_SLIM: 1_234_000_000}), cpu)

    build_record = done.record(CPU_SLIM).build
    assert build_record is not None
    assert build_record.status == BUILT
    assert build_record.image_id is not None and build_record.image_id.startswith("sha256:")
    assert build_record.input_hash is not None and build_record.input_hash.startswith("sha256:")
    assert build_record.size_bytes == 1_234_000_000
    assert build_record.size_budget_bytes == 1_600_000_000
    assert build_record.layer_count == 1
    assert [x.size_bytes for x in build_record.largest_layers] == [9000, 500, 70, 40, 10]
    assert build_record.log_path is not None
    log = Path(build_record.log_path)
    assert log == done.run.log_file(CPU_SLIM)
    assert "Successfully installed torch-2.13.0" in log.read_text(encoding="utf-8")
    plan_record = done.record(CPU_SLIM).plan
    assert plan_record is not None
    assert plan_record.aliases == ("2.13-cpu-slim", "latest-slim")
    assert plan_record.required_probes == (
        "env",
        "autograd",
        "matmul",
        "higher_order",
        "compile",
        "ddp",
    )


def test_events_of_a_build_are_started_each_step_then_finished(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    done = run_build(tmp_path, FakeBuilder(engine), cpu[:1])

    assert done.seen(CPU_SLIM) == [
        ("started", "building with fake"),
        ("step", f"step 1/4: FROM {CPU_BASE}"),
        ("step", "step 2/4: RUN true"),
        ("step", "step 3/4: RUN true"),
        ("step", "step 4/4: RUN pip install -r requirements.txt"),
        ("finished", done.events[-1].message),
    ]
    finished = done.events[-1]
    assert finished.status == BUILT
    assert finished.message.startswith("built (0.00 GB, 1 layers, ")


def test_skipped_and_failed_images_get_a_finished_event_with_their_status(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    del engine.images[CPU_BASE]

    done = run_build(tmp_path, FakeBuilder(engine), cpu)

    finished = {e.image: e for e in done.events if e.kind == "finished"}
    assert finished[CPU_SLIM].status == FAILED
    assert finished[CPU_SLIM].message.startswith(f"failed: the base image {CPU_BASE}")
    assert finished[CPU_FULL].status == SKIPPED
    assert [e.kind for e in done.events] == ["finished", "finished"]


def test_finished_event_carries_the_build_log_for_github_folding(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    out = io.StringIO()
    contexts = BuildContexts(RenderOptions(), ContextInputs())
    run = RunFolder.create(tmp_path / "results")
    view = PlainView(out, github=True)

    failing = FakeBuilder(engine, fail=[CPU_SLIM])
    BuildRun(engine, failing, cpu, BuildSettings(), contexts, run, view).execute()

    lines = out.getvalue().splitlines()
    start = lines.index(f"::group::{CPU_SLIM} build log")
    end = lines.index("::endgroup::", start)
    assert lines[start - 1] == f"{CPU_SLIM}: failed: {PIP_FAILURE}"
    assert lines[start + 1 : end] == run.log_file(CPU_SLIM).read_text().splitlines()
    assert "ERROR: No matching distribution found for torch==9.9.9" in lines[start:end]
    assert lines[-1] == f"{CPU_FULL}: not built: its slim image failed ({PIP_FAILURE})"


# Pulling a missing base -------------------------------------------------------------


def test_a_missing_base_is_pulled_only_when_asked(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    del engine.images[CPU_BASE]
    engine.pullable[CPU_BASE] = FakeEngine().add(CPU_BASE, "sha256:" + "d" * 64)

    without = run_build(tmp_path / "a", FakeBuilder(engine), cpu[:1])
    assert without.by_name(CPU_SLIM).status == FAILED and engine.pulls == []
    assert "--pull" in without.by_name(CPU_SLIM).message
    pulled = run_build(tmp_path / "b", FakeBuilder(engine), cpu[:1], pull=True)
    assert engine.pulls == [CPU_BASE] and pulled.by_name(CPU_SLIM).status == BUILT


def test_a_failed_pull_is_named_in_the_failure(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    del engine.images[CPU_BASE]  # and nothing to pull it from: the fake says why
    done = run_build(tmp_path, FakeBuilder(engine), cpu[:1], pull=True)
    assert engine.pulls == [CPU_BASE]
    assert f"pull failed: manifest for {CPU_BASE} not found" in done.by_name(CPU_SLIM).message


def test_each_record_names_what_the_image_was_built_from_for_its_provenance(
    tmp_path: Path, engine: FakeEngine, cpu: list[ImagePlan]
) -> None:
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    torch = wheels / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    torch.write_bytes(b"torch for x86_64")
    (wheels / "torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl").write_bytes(b"arm")
    contexts = BuildContexts(RenderOptions(), ContextInputs(wheelhouse=wheels))
    run = RunFolder.create(tmp_path / "results")
    builder = FakeBuilder(engine)
    BuildRun(engine, builder, cpu, BuildSettings(), contexts, run, lambda _: None).execute()
    slim, full = (Outcome([], [], run).record(name).build for name in (CPU_SLIM, CPU_FULL))
    assert slim is not None and full is not None
    assert slim.parent_id == "sha256:" + "b" * 64  # the base it was built FROM
    assert full.parent_id == slim.image_id
    named = {m.name: m.sha256 for m in slim.materials}
    assert named[f"wheelhouse/{torch.name}"] == hashlib.sha256(b"torch for x86_64").hexdigest()
    assert "uv" in named and not any("aarch64" in name for name in named)  # its platform's only
    # Up to date, the image still says what it was built from.
    again = BuildRun(engine, builder, cpu, BuildSettings(), contexts, run, lambda _: None)
    [up_to_date] = [r for r in again.execute() if r.name == CPU_SLIM]
    assert up_to_date.status is BuildStatus.UP_TO_DATE and up_to_date.materials == slim.materials


# The security step ------------------------------------------------------------------


class Suites(FakeIndexes):
    """A security suite whose Packages index has the digest `packages` says."""

    def __init__(self) -> None:
        super().__init__({})
        self.packages = "ab" * 32

    def state(self, suite: SecuritySuite) -> IndexState:
        read = super().state(suite)
        return IndexState(read.suite, read.facts, self.packages, read.offered)


def secured_build(
    tmp_path: Path, engine: FakeEngine, plans: list[ImagePlan], suites: Suites, **options: Any
) -> tuple[Outcome, FakeBuilder]:
    builder = FakeBuilder(engine)
    contexts = BuildContexts(RenderOptions(), ContextInputs())
    run = RunFolder.create(tmp_path / "results")
    events: list[Event] = []
    settings = BuildSettings(**options)
    security = SecuritySource(suites)
    done = BuildRun(engine, builder, plans, settings, contexts, run, events.append, None, security)
    return Outcome(done.execute(), events, run), builder


def dockerfile(request: BuildRequest) -> str:
    return (request.context_dir / "Dockerfile").read_text()


def test_a_base_imagekit_did_not_bootstrap_takes_the_security_suites_fixes_in_slim(
    tmp_path: Path, cpu: list[ImagePlan]
) -> None:
    engine = FakeEngine(outputs={"cat": OS_RELEASE})
    engine.add(CPU_BASE, "sha256:" + "e" * 64)  # no io.imagekit.base.* labels: a registry's
    suites = Suites()
    first, builder = secured_build(tmp_path, engine, cpu, suites)
    assert first.status() == {CPU_SLIM: BUILT, CPU_FULL: BUILT}
    slim, full = (dockerfile(r) for r in builder.requests)
    assert "deb http://deb.debian.org/debian-security bookworm-security main" in slim
    assert f'[ "$listed" = "{"ab" * 32}" ]' in slim and "apt-get $only -y" in slim
    assert "bookworm-security" not in full  # FROM its slim, which took them
    assert len(suites.asked) == 1  # read once for the base
    # The same suite: up to date. A new fix in the suite: a new slim, and a new full on it.
    again, _ = secured_build(tmp_path / "again", engine, cpu, suites)
    assert again.status() == {CPU_SLIM: UP_TO_DATE, CPU_FULL: UP_TO_DATE}
    suites.packages = "cd" * 32
    fixed, builder = secured_build(tmp_path / "fixed", engine, cpu, suites)
    assert fixed.status() == {CPU_SLIM: BUILT, CPU_FULL: BUILT}
    assert fixed.by_name(CPU_SLIM).input_hash != first.by_name(CPU_SLIM).input_hash
    assert "cd" * 32 in dockerfile(builder.requests[0])


def test_a_bootstrapped_base_and_an_offline_build_take_no_security_step(
    tmp_path: Path, cpu: list[ImagePlan]
) -> None:
    engine = FakeEngine(outputs={"cat": OS_RELEASE})
    engine.add(CPU_BASE, "sha256:" + "b" * 64, labels={L.BASE_SUITE: "bookworm"})
    suites = Suites()
    _, builder = secured_build(tmp_path, engine, cpu, suites)
    assert not any("bookworm-security" in dockerfile(r) for r in builder.requests)
    plain = FakeEngine(outputs={"cat": OS_RELEASE})
    plain.add(CPU_BASE, "sha256:" + "e" * 64)
    _, offline = secured_build(tmp_path / "offline", plain, cpu, suites, network="none")
    assert not any("bookworm-security" in dockerfile(r) for r in offline.requests)
    assert suites.asked == []
