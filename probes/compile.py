"""torch.compile (inductor) works: compiled results match eager, as in PyTorch's smoke test.

The checks follow PyTorch's release smoke test (`.ci/pytorch/smoke_test/smoke_test.py`,
`smoke_test_compile`): sin(x) + cos(x) compiled against eager in float16, float32 and float64,
the vectorised ISA inductor picked for the CPU, and a small conv net under
`mode="max-autotune"`. A small module's forward and its parameters' gradients are checked too,
since training through a compiled module is what users do with it.

On a CPU inductor writes C++ and builds it with the image's C++ compiler (g++, `-fopenmp`)
against Python's headers (Python.h) and torch's (`torch/include`), hashing its precompiled
header with `openssl`; an image without them cannot compile. Its `io.imagekit.torch-compile`
label says which (`expected["torch_compile"]`): `False` skips this probe, `True` or unknown
tries it, and a compile that raises fails it with the error's type and first line.

The compiles run in a child Python process (this file, `--checks-here`), so that nothing
inductor leaves behind reaches the probes that run after this one in the runner's process.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from _probekit import Recorder, error, main_for, probe_name, result, skip

NAME = probe_name(__file__)
PROBE = {
    "level": "cpu",
    "needs_gpu": False,
    # Measured in host mode (`imagekit probe --probes compile`, torch 2.13) on 2 CPU cores: the
    # run took 30-55 s (the probe 25-50 s), the first, cold compile 11-25 s of it and
    # max-autotune 3-11 s, the slowest while a build and a test run shared the cores. About 3x
    # the slowest run, which also leaves room for max-autotune on a GPU (it benchmarks Triton
    # kernels; not measured here). The cache is fresh on every run (below), so a run is never
    # faster than a cold one.
    "timeout_s": 180,
    "flavours": ["slim", "full"],
    # Measured at most 1.7 GB on 2 cores, the runner and the compiling child together (g++ on
    # inductor's precompiled header a good part of it). Inductor compiles in worker processes,
    # one per core up to 32, about 110 MB each (0.7 GB more at 8 than at 2): on a big GPU node
    # that is some 5 GB, over the default 3 GiB.
    "memory_bytes": 6_442_450_944,
}

DTYPES = ("float16", "float32", "float64")
# The smoke test's batch is 64; max-autotune's compile costs about the same with 8 or 64 on 2
# cores (measured), so a smaller one only keeps eager and the benchmarks light.
AUTOTUNE_BATCH = 16
WARM_SAMPLES = 7
WARM_CALLS = 20
# The first argument with which this file runs the checks themselves (`compile_apart`).
CHILD = "--checks-here"


class CompileFailed(Exception):
    """A compile raised: the checks after it would fail the same way, so they are not run."""


def describe(exc: BaseException) -> str:
    """The error's type and first line, from the innermost cause, and what a compiler said.

    Dynamo and inductor wrap what went wrong (`InductorError`, `BackendCompilerFailed:
    backend='inductor' raised:`), so the outer message alone does not say that, e.g., no C++
    compiler was found; a failed build's own first `error:` line (`fatal error: Python.h: No
    such file or directory`) says what the image lacks better than its command line does.
    """
    chain = [exc]
    while len(chain) < 10:
        inner = getattr(chain[-1], "inner_exception", None) or chain[-1].__cause__
        if not isinstance(inner, BaseException) or inner in chain:
            break
        chain.append(inner)
    root = chain[-1]
    command, status = getattr(root, "cmd", None), getattr(root, "returncode", None)
    if isinstance(command, (list, tuple)) and command and isinstance(status, int):
        first = f"{os.path.basename(str(command[0]))} exited with status {status}"
    else:
        lines = [x.strip() for x in str(root).splitlines() if x.strip()]
        first = lines[0][:300] if lines else ""
    detail = f"{type(root).__name__}: {first}" if first else type(root).__name__
    said = compiler_said(chain)
    if said:
        detail += f": {said}"
    if root is not exc:
        detail += f" (raised as {type(exc).__name__})"
    return detail


def compiler_said(chain: list[BaseException]) -> str:
    """The first `error:` line a failed build printed (its output rides on the exception)."""
    for link in chain:
        for stream in (getattr(link, "stderr", None), getattr(link, "output", None)):
            text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream
            said = re.search(r"(?:fatal )?error: .*", text) if isinstance(text, str) else None
            if said:
                return said.group(0).strip()[:300]
    return ""


def attempt(rec: Recorder, name: str, call: Any) -> Any:
    """`call()`, or a failed check named `name` saying what it raised, then `CompileFailed`."""
    try:
        return call()
    except Exception as exc:
        rec.check(name, False, describe(exc))
        raise CompileFailed from exc


def close(torch: Any, seen: Any, expected: Any, **tolerance: float) -> tuple[bool, str]:
    """`torch.testing.assert_close` as a check's outcome and detail."""
    try:
        torch.testing.assert_close(seen, expected, **tolerance)
    except AssertionError as exc:
        lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
        return False, "; ".join(lines[:3])
    err = (seen.double() - expected.double()).abs().max().item() if seen.numel() else 0.0
    return True, f"max abs difference {err:.3g}"


def sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_sin_cos(torch: Any, rec: Recorder, device: str) -> None:
    """The smoke test's first check: one pointwise function, compiled, in three dtypes."""

    def foo(x: Any) -> Any:
        return torch.sin(x) + torch.cos(x)

    compiled = torch.compile(foo)
    for name in DTYPES:
        x = torch.rand(3, 3, device=device).to(getattr(torch, name))
        seen = attempt(rec, f"sin(x)+cos(x) compiles in {name}", lambda x=x: compiled(x))
        rec.check(f"compiled sin(x)+cos(x) equals eager in {name}", *close(torch, seen, foo(x)))


def time_calls(torch: Any, device: str, call: Any) -> float:
    """Seconds for `WARM_CALLS` calls of `call`."""
    sync(torch, device)
    started = time.perf_counter()
    for _ in range(WARM_CALLS):
        call()
    sync(torch, device)
    return time.perf_counter() - started


def check_module(torch: Any, rec: Recorder, device: str) -> None:
    """A Linear-ReLU-Linear module: forward, backward and warm speed against an eager twin."""
    torch.manual_seed(0)
    # Big enough that a call is kernels, not Python: on 2 cores about 1 ms eager.
    eager = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)
    ).to(device)
    twin = copy.deepcopy(eager)  # the same weights, compiled; `eager` is never compiled
    compiled = torch.compile(twin)
    x = torch.randn(128, 256, device=device)

    started = time.perf_counter()
    out = attempt(rec, "a Linear-ReLU-Linear module compiles", lambda: compiled(x))
    sync(torch, device)
    rec.metric("first_compile_s", time.perf_counter() - started)
    want = eager(x)
    rec.check("compiled module's forward equals eager", *close(torch, out, want))

    attempt(rec, "the compiled module's backward compiles", lambda: out.square().sum().backward())
    want.square().sum().backward()
    for (name, param), ref in zip(twin.named_parameters(), eager.parameters(), strict=True):
        rec.check(
            f"gradient of {name} equals eager",
            *close(torch, param.grad, ref.grad, rtol=1e-4, atol=1e-5),
        )

    # Warm calls, eager and compiled in turn so that both see the same machine load.
    eager_s, compiled_s = [], []
    with torch.no_grad():
        attempt(rec, "the module compiles for inference", lambda: compiled(x))
        for _ in range(WARM_SAMPLES):
            eager_s.append(time_calls(torch, device, lambda: eager(x)))
            compiled_s.append(time_calls(torch, device, lambda: compiled(x)))
    eager_ms = statistics.median(eager_s) / WARM_CALLS * 1000
    compiled_ms = statistics.median(compiled_s) / WARM_CALLS * 1000
    rec.metric("eager_warm_median_ms", eager_ms)
    rec.metric("compiled_warm_median_ms", compiled_ms)
    # A ratio has no unit, and a metric's name must end in one (`records.METRIC_NAME`): a fact.
    rec.facts["warm_speedup"] = round(eager_ms / compiled_ms, 3) if compiled_ms else None


def check_vec_isa(rec: Recorder) -> None:
    """The SIMD instruction set inductor vectorises CPU kernels for, as the smoke test asks."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # torch before 2.5
        from torch._inductor.codecache import pick_vec_isa

    isa = pick_vec_isa()
    rec.facts["isa"] = str(isa) if isa else None
    rec.facts["isa_bit_width"] = isa.bit_width() if isa else None
    rec.check(
        "inductor found a vectorised ISA for this CPU",
        bool(isa),
        f"{type(isa).__name__}, {isa.bit_width()} bits" if isa else "none: scalar kernels only",
    )


def check_max_autotune(torch: Any, rec: Recorder, device: str) -> None:
    """The smoke test's conv net under max-autotune, which benchmarks kernel choices."""
    nn, functional = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = functional.relu(self.conv1(x))
            x = functional.relu(self.conv2(x))
            x = torch.flatten(functional.max_pool2d(x, 2), 1)
            return functional.log_softmax(self.fc2(functional.relu(self.fc1(x))), dim=1)

    torch._dynamo.reset()  # another mode: compile afresh, as the smoke test does
    torch.manual_seed(0)
    model = Net().to(device).eval()
    x = torch.rand(AUTOTUNE_BATCH, 1, 28, 28, device=device)
    compiled = torch.compile(model, mode="max-autotune")
    with torch.no_grad():
        started = time.perf_counter()
        out = attempt(rec, "a conv net compiles with mode=max-autotune", lambda: compiled(x))
        sync(torch, device)
        rec.metric("max_autotune_compile_s", time.perf_counter() - started)
        want = model(x)
    # TF32 ("high") on a GPU and other GEMM kernels: log-probabilities agree to about 1e-3.
    rec.check(
        "max-autotune conv net equals eager (rtol 1e-2, atol 1e-2)",
        *close(torch, out, want, rtol=1e-2, atol=1e-2),
    )


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    """Compile in a Python process of its own (see `compile_apart`), unless the image says it
    cannot."""
    if expected.get("torch_compile") is False:
        return skip(
            NAME,
            "the image carries no C++ compiler for inductor (label io.imagekit.torch-compile=no);"
            ' use torch.compile(backend="aot_eager"), which needs none, or the full image',
        )
    # A cache of our own, made before torch._inductor is imported: every run compiles cold (the
    # figures mean the same each time), nothing is left behind, and nothing depends on
    # inductor's default folder, which is named after getpass.getuser() (a container's uid may
    # have no passwd entry).
    cache = tempfile.mkdtemp(prefix="imagekit-inductor-", dir=tempfile.gettempdir())
    try:
        return compile_apart(device, cache, float(expected.get("time_scale") or 1))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def compile_apart(device: str, cache: str, time_scale: float = 1) -> dict[str, Any]:
    """The checks, run by this file in a child Python process; its report, or why there is none.

    The runner runs every probe in one process, and what inductor leaves in a process stays:
    its compile workers and threads, the system's OpenMP runtime its kernels link, dynamo's
    state. After a compile there, a rank `ddp` forks from that process deadlocked at its exit
    (gloo's thread waiting for the GIL its process group's destructor holds) in 5 and then 9 of
    40 runs, against none of 40 without one. A process of its own leaves the runner as it was,
    and a crash in compiled code takes down only this probe.
    """
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": cache,
        "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
    }
    # Report our own timeout before the runner's (`time_scale`: an emulated image's limits).
    limit_s = float(PROBE["timeout_s"]) * time_scale - 10
    try:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), CHILD, device],
            capture_output=True,
            text=True,
            env=env,
            timeout=limit_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        sys.stderr.write(as_text(exc.stderr))
        return result(NAME, "timeout", f"the compiles took over {limit_s:g}s")
    sys.stderr.write(done.stderr)  # inductor's warnings and logs, where the runner keeps them
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            report: dict[str, Any] = json.loads(line)
            return report
    last = next((x for x in reversed(done.stderr.splitlines()) if x.strip()), "")
    return result(
        NAME,
        "error",
        f"the compiling process exited {done.returncode} without a report"
        + (f": {last.strip()[-300:]}" if last else ""),
    )


def as_text(stream: str | bytes | None) -> str:
    return stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""


@contextlib.contextmanager
def own_header_folder(cache: str) -> Iterator[None]:
    """Inductor's precompiled C++ header (~150 MB) in `cache` too, for this run only.

    Inductor keeps it in `default_cache_dir()/precompiled_headers` whatever
    TORCHINDUCTOR_CACHE_DIR says (`codecache._HEADER_DIR`, fixed at import): left alone, it
    would be built once per machine and user, named by getpass.getuser(), and reused by later
    runs, whose first compile would then not be cold. A torch without the attribute is left as
    it is.
    """
    from torch._inductor import codecache

    headers = os.path.join(cache, "precompiled_headers")
    ours = {"_HEADER_DIR": headers, "_HEADER_LOCK_DIR": os.path.join(headers, "locks")}
    before = {name: getattr(codecache, name) for name in ours if hasattr(codecache, name)}
    if len(before) == len(ours):
        for name, value in ours.items():
            setattr(codecache, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(codecache, name, value)


def run_checks(device: str) -> dict[str, Any]:
    """The checks, in this process; TORCHINDUCTOR_CACHE_DIR names a fresh folder."""
    import torch
    import torch._dynamo

    rec = Recorder(NAME, device)
    rec.facts.update(torch=torch.__version__, backend="inductor")
    precision = torch.get_float32_matmul_precision()
    torch._dynamo.reset()  # nothing compiled earlier in this process is reused
    try:
        with own_header_folder(os.environ["TORCHINDUCTOR_CACHE_DIR"]):
            checks(torch, rec, device)
    except CompileFailed:
        pass  # recorded as a failed check; the probe fails
    finally:
        # Whoever called it in-process keeps torch as it was.
        torch.set_float32_matmul_precision(precision)
        torch._dynamo.reset()
    return rec.report()


def checks(torch: Any, rec: Recorder, device: str) -> None:
    """Each check in turn; the first compile that raises ends them (`CompileFailed`)."""
    # The module first: its first call carries inductor's one-time start (its imports, the
    # compile workers, the C++ kernels' precompiled header), so `first_compile_s` is cold.
    check_module(torch, rec, device)
    check_sin_cos(torch, rec, device)
    if device == "cpu":
        check_vec_isa(rec)
    torch.set_float32_matmul_precision("high")
    check_max_autotune(torch, rec, device)


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        # The child `compile_apart` starts: the report is its last line on stdout.
        try:
            report = run_checks(sys.argv[2])
        except Exception as exc:
            report = error(NAME, exc)
        print(json.dumps(report, sort_keys=True))
    else:
        main_for(NAME, run)
