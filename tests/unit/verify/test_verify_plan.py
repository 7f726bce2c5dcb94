"""The verify plan and the record builder, as plain values: no engine, no runner, no store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import GpuUnavailableError, InputError
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo, LocalImage
from imagekit.kernel.records import Check, Level, LevelState
from imagekit.kernel.runtime import EMULATION_SLOWDOWN, START_MARGIN_S, GpuChoice
from imagekit.kernel.vocabulary import EngineName
from imagekit.matrix.compat import load_compat
from imagekit.verify.plan import GpuFallback, VerifyPlan
from imagekit.verify.ports import ProbeRun
from imagekit.verify.probe_contract import ProbeDevice
from imagekit.verify.probes import ProbeSpec, RunnerOutput
from imagekit.verify.record import Inspection, inspection_of, record_of, required_probes
from imagekit.verify.requests import VerifySettings
from imagekit.verify.settings import Target
from tests.fakes import passing

PROBES_DIR = Path("probes")  # never read: the plan takes the specs as given
SPECS = {
    "env": ProbeSpec(
        "env", needs_gpu=False, timeout_s=30, flavours=("slim", "full"), level=Level.STATIC
    ),
    "autograd": ProbeSpec("autograd", needs_gpu=False, timeout_s=60, flavours=("slim", "full")),
    "cuda_extension": ProbeSpec(
        "cuda_extension", needs_gpu=True, timeout_s=600, flavours=("full",), level=Level.GPU
    ),
    "ddp_nodes": ProbeSpec(
        "ddp_nodes", needs_gpu=False, timeout_s=300, flavours=("slim", "full"), nodes=2
    ),
}
DOCKER = EngineInfo(server_version="26.1.5", architecture="x86_64")
DOCKER_GPUS = replace(DOCKER, runtimes=("nvidia", "runc"))
SLIM = LocalImage(
    id="sha256:" + "a" * 64,
    tags=("imagekit-demo/pytorch:slim",),
    labels={L.FLAVOUR: "slim", L.TORCH: "2.13.0", L.REQUIRED_PROBES: "env autograd"},
    size_bytes=1,
    layers=(),
    created="2026-12-01",
    platform="linux/amd64",
)
TARGET = Target("a-slim", "imagekit-demo/pytorch:slim")


def plan_of(facts: EngineInfo = DOCKER, **settings: Any) -> VerifyPlan:
    return VerifyPlan.of(VerifySettings(probes_dir=PROBES_DIR, **settings), SPECS, facts)


@pytest.mark.parametrize(
    ("choice", "fallback"),
    [
        (GpuChoice.AUTO, GpuFallback.CPU),
        (GpuChoice.ALL, GpuFallback.NONE),
        (GpuChoice.NONE, GpuFallback.NONE),
    ],
)
def test_only_gpus_auto_falls_back_to_the_cpu(choice: GpuChoice, fallback: GpuFallback) -> None:
    assert GpuFallback.of(choice) is fallback
    assert plan_of(DOCKER_GPUS, gpus=choice).fallback is fallback


def test_the_plan_asks_for_gpus_where_the_engine_has_them_and_says_why_not_where_not() -> None:
    with_gpus = plan_of(DOCKER_GPUS)
    assert with_gpus.gpus and with_gpus.notes == ()
    without = plan_of(DOCKER)
    assert not without.gpus
    assert without.notes == (
        "no NVIDIA runtime and no CDI GPU devices on this engine: running CPU probes only "
        "(GPU probes skip)",
    )
    assert plan_of(DOCKER, gpus=GpuChoice.ALL).gpus  # asked for: the engine answers
    assert not plan_of(DOCKER_GPUS, gpus=GpuChoice.NONE).gpus


def test_gpus_all_on_an_engine_that_would_drop_them_unsaid_is_refused_by_the_plan() -> None:
    podman = EngineInfo(
        name=EngineName.PODMAN, server_version="4.3.1", cdi_devices=("nvidia.com/gpu=all",)
    )
    with pytest.raises(GpuUnavailableError, match="would start the probes without GPUs"):
        plan_of(podman, gpus=GpuChoice.ALL)
    assert plan_of(podman).notes[0].startswith("the host has CDI devices")


def test_an_image_runs_the_probes_of_its_flavour_on_the_device_asked_within_their_limits() -> None:
    planned = plan_of(DOCKER_GPUS).for_target(TARGET, SLIM, "run-1", gpus=True)
    request = planned.request
    assert request.probes == ("env", "autograd")  # cuda_extension is full's; ddp_nodes multi-node
    assert request.device is ProbeDevice.CUDA and request.gpus and planned.gpus
    assert request.timeout_s == 30 + 60 + START_MARGIN_S
    assert request.labels == {L.RUN_ID: "run-1", L.IMAGE: "a-slim"}
    assert request.image == SLIM.id and not planned.emulation.emulated
    assert planned.nodes is None
    assert planned.required == ("env", "autograd")  # the image's label
    cpu = plan_of(DOCKER_GPUS).for_target(TARGET, SLIM, "run-1", gpus=False)
    assert cpu.request.device is ProbeDevice.CPU and not cpu.gpus


def test_what_must_pass_is_the_matrix_s_else_the_probes_asked_else_the_labels() -> None:
    plan = plan_of(probes=("env",))
    matrix = plan.for_target(replace(TARGET, required=("autograd",)), SLIM, "r", gpus=False)
    assert matrix.required == ("autograd",)
    assert plan.for_target(TARGET, SLIM, "r", gpus=False).required == ("env",)
    unlabelled = replace(SLIM, labels={L.FLAVOUR: "slim"})
    assert plan_of().for_target(TARGET, unlabelled, "r", gpus=False).required == ()


def test_an_emulated_image_has_its_limits_stretched_and_its_cpu_named() -> None:
    arm = replace(SLIM, platform="linux/arm64")
    planned = plan_of(nodes=2).for_target(TARGET, arm, "r", gpus=False)
    assert planned.emulation.emulated
    assert planned.request.timeout_s == (30 + 60 + START_MARGIN_S) * EMULATION_SLOWDOWN
    assert planned.request.environment == {"QEMU_CPU": "neoverse-n2"}
    assert planned.nodes is not None
    assert planned.nodes.timeout_s == (300 + START_MARGIN_S) * EMULATION_SLOWDOWN


def test_nodes_from_the_run_or_the_matrix_plan_the_multi_node_run() -> None:
    planned = plan_of(nodes=2).for_target(TARGET, SLIM, "r", gpus=True)
    assert planned.nodes is not None
    assert (planned.nodes.probe, planned.nodes.nodes, planned.nodes.device) == (
        "ddp_nodes",
        2,
        "cuda",
    )
    assert planned.nodes.labels == planned.request.labels
    by_matrix = plan_of().for_target(replace(TARGET, nodes=3), SLIM, "r", gpus=False)
    assert by_matrix.nodes is not None and by_matrix.nodes.nodes == 3
    # A flavour the multi-node probe does not apply to runs without it.
    full_only = {**SPECS, "ddp_nodes": replace(SPECS["ddp_nodes"], flavours=("full",))}
    plan = VerifyPlan.of(VerifySettings(probes_dir=PROBES_DIR, nodes=2), full_only, DOCKER)
    assert plan.for_target(TARGET, SLIM, "r", gpus=False).nodes is None


def test_nodes_without_a_multi_node_probe_or_an_unknown_probe_is_refused_for_the_image() -> None:
    single = {n: s for n, s in SPECS.items() if s.nodes == 1}
    plan = VerifyPlan.of(VerifySettings(probes_dir=PROBES_DIR, nodes=2), single, DOCKER)
    with pytest.raises(InputError, match="no multi-node probe"):
        plan.for_target(TARGET, SLIM, "r", gpus=False)
    with pytest.raises(InputError, match="unknown probe"):
        plan_of(probes=("nope",)).for_target(TARGET, SLIM, "r", gpus=False)


def test_probes_that_none_apply_to_the_image_s_flavour_are_refused_naming_theirs() -> None:
    plan = plan_of(probes=("cuda_extension",))
    with pytest.raises(InputError, match=r"applies to a slim image \(cuda_extension on full\)"):
        plan.for_target(TARGET, SLIM, "r", gpus=False)


def test_on_the_cpu_the_same_plan_asks_for_no_gpus_anywhere() -> None:
    planned = plan_of(DOCKER_GPUS, nodes=2).for_target(TARGET, SLIM, "r", gpus=True)
    cpu = planned.on_cpu()
    assert cpu.request == replace(planned.request, device=ProbeDevice.CPU, gpus=False)
    assert cpu.nodes is not None and planned.nodes is not None
    assert cpu.nodes == replace(planned.nodes, device="cpu", gpus=False)
    assert (cpu.target, cpu.image, cpu.required) == (
        planned.target,
        planned.image,
        ("env", "autograd"),
    )


# The record ---------------------------------------------------------------------------------


def test_a_multi_node_probe_that_ran_is_always_required() -> None:
    ran = (passing("env"), passing("autograd"), passing("ddp_nodes"))
    assert required_probes(("env",), ran, SPECS) == ("env", "ddp_nodes")
    assert required_probes((), ran, SPECS) == ("env", "autograd", "ddp_nodes")


def test_the_inspection_holds_the_label_against_what_ran_and_the_compat_checks() -> None:
    structure = [Check(name="default user is numeric and non-root", ok=True, detail="seen")]
    env = passing("env", {"torch": "2.12.1+cpu", "cuda": None})
    inspection = inspection_of(SLIM, structure, (env,), load_compat())
    assert inspection.structure[0] == structure[0]
    lying = [c.name for c in inspection.structure if not c.ok]
    assert lying == ["torch label agrees with the image"]  # the label says 2.13.0
    assert not inspection.ok
    assert Inspection((), ()).ok


def test_the_record_of_an_image_is_made_of_its_plan_its_run_and_its_inspection() -> None:
    planned = plan_of().for_target(TARGET, SLIM, "r", gpus=False)
    results = (passing("env"), passing("autograd"))
    run = ProbeRun(RunnerOutput("cpu", "asked for cpu", results), "", 0, False, 2.5, 0.25)
    record = record_of(planned, run, Inspection((), ()), SPECS, verify_wall_s=3.14159)
    assert record.status == "pass" and record.level == "cpu"
    assert record.levels[Level.GPU] is LevelState.NOT_APPLICABLE
    assert record.required_probes == ("env", "autograd")
    assert record.required_levels == (Level.STATIC, Level.CPU)
    assert record.reference == TARGET.reference and record.image_id == SLIM.id
    assert record.timings.verify_wall_s == 3.142 and record.timings.probe_wall_s == 2.5
    assert record.timings.timeout_s == planned.request.timeout_s
    failed = Inspection((Check(name="no pip cache", ok=False, detail="seen"),), ())
    assert record_of(planned, run, failed, SPECS, 1.0).status == "fail"
