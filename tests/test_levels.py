"""The verification ladder: static, cpu, gpu."""

from __future__ import annotations

from imagekit.levels import highest, rungs

LEVELS = {
    "env": "static",
    "cuda_stack": "static",
    "autograd": "cpu",
    "ddp": "cpu",
    "cudnn": "gpu",
}


def result(probe: str, status: str) -> dict:
    return {"probe": probe, "status": status}


def run(*results: dict, required=None, inspection_ok=True, gpu=False, cuda=True) -> dict:
    return rungs(
        list(results),
        LEVELS,
        required,
        inspection_ok=inspection_ok,
        ran_on_gpu=gpu,
        cuda_image=cuda,
    )


CPU_PASS = (
    result("env", "pass"),
    result("cuda_stack", "pass"),
    result("autograd", "pass"),
    result("ddp", "pass"),
)


def test_a_cuda_image_verified_without_a_gpu_reaches_cpu_and_says_gpu_was_not_run() -> None:
    state = run(*CPU_PASS, result("cudnn", "skip"))
    assert state == {"static": "pass", "cpu": "pass", "gpu": "not run"}
    assert highest(state) == "cpu"


def test_on_a_gpu_every_rung_passes() -> None:
    state = run(*CPU_PASS, result("cudnn", "pass"), gpu=True)
    assert highest(state) == "gpu"


def test_a_gpu_probe_that_passed_off_gpu_does_not_count() -> None:
    assert run(*CPU_PASS, result("cudnn", "pass"), gpu=False)["gpu"] == "not run"


def test_a_cpu_image_has_no_gpu_rung() -> None:
    state = run(
        result("env", "pass"), result("cuda_stack", "skip"), result("autograd", "pass"), cuda=False
    )
    assert state == {"static": "pass", "cpu": "pass", "gpu": "n/a"}
    assert highest(state) == "cpu"


def test_static_checks_alone_reach_static() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "pass"))
    assert state["cpu"] == "not run" and highest(state) == "static"


def test_a_failed_static_check_stops_the_ladder_even_when_workloads_pass() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "fail"), result("autograd", "pass"))
    assert state["static"] == "fail" and state["cpu"] == "pass"
    assert highest(state) == "none"


def test_failed_inspection_fails_the_static_rung() -> None:
    assert highest(run(*CPU_PASS, inspection_ok=False)) == "none"


def test_a_timeout_in_a_workload_probe_caps_the_level_at_static() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "pass"), result("ddp", "timeout"))
    assert state["cpu"] == "fail" and highest(state) == "static"


def test_only_required_probes_count() -> None:
    state = run(*CPU_PASS, result("cudnn", "fail"), required=["env", "cuda_stack", "autograd"])
    assert state["gpu"] == "not run" and highest(state) == "cpu"
