"""The verification ladder: static, cpu, gpu."""

from __future__ import annotations

from imagekit.kernel.records import Check, Level, LevelState, ProbeResult, Status
from imagekit.verify.levels import level_states, reached

LEVELS = {
    "env": Level.STATIC,
    "cuda_stack": Level.STATIC,
    "autograd": Level.CPU,
    "ddp": Level.CPU,
    "cudnn": Level.GPU,
}


def result(probe: str, status: str) -> ProbeResult:
    checks = (Check(name=f"{probe} works", ok=True),) if status == "pass" else ()
    return ProbeResult(probe=probe, status=Status(status), checks=checks)


def run(
    *results: ProbeResult, required=None, inspection_ok=True, gpu=False, cuda=True
) -> dict[Level, LevelState]:
    return level_states(
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
    assert state == {
        Level.STATIC: LevelState.PASS,
        Level.CPU: LevelState.PASS,
        Level.GPU: LevelState.NOT_RUN,
    }
    assert reached(state) == "cpu"


def test_on_a_gpu_every_rung_passes() -> None:
    state = run(*CPU_PASS, result("cudnn", "pass"), gpu=True)
    assert reached(state) == "gpu"


def test_a_gpu_probe_that_passed_off_gpu_does_not_count() -> None:
    assert run(*CPU_PASS, result("cudnn", "pass"), gpu=False)[Level.GPU] is LevelState.NOT_RUN


def test_a_cpu_image_has_no_gpu_rung() -> None:
    state = run(
        result("env", "pass"), result("cuda_stack", "skip"), result("autograd", "pass"), cuda=False
    )
    assert state == {
        Level.STATIC: LevelState.PASS,
        Level.CPU: LevelState.PASS,
        Level.GPU: LevelState.NOT_APPLICABLE,
    }
    assert reached(state) == "cpu"


def test_static_checks_alone_reach_static() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "pass"))
    assert state[Level.CPU] is LevelState.NOT_RUN and reached(state) == "static"


def test_a_failed_static_check_stops_the_ladder_even_when_workloads_pass() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "fail"), result("autograd", "pass"))
    assert state[Level.STATIC] is LevelState.FAIL and state[Level.CPU] is LevelState.PASS
    assert reached(state) == "none"


def test_failed_inspection_fails_the_static_rung() -> None:
    assert reached(run(*CPU_PASS, inspection_ok=False)) == "none"


def test_a_timeout_in_a_workload_probe_caps_the_level_at_static() -> None:
    state = run(result("env", "pass"), result("cuda_stack", "pass"), result("ddp", "timeout"))
    assert state[Level.CPU] is LevelState.FAIL and reached(state) == "static"


def test_only_required_probes_count() -> None:
    state = run(*CPU_PASS, result("cudnn", "fail"), required=["env", "cuda_stack", "autograd"])
    assert state[Level.GPU] is LevelState.NOT_RUN and reached(state) == "cpu"
