"""The image's CUDA compiler builds a torch C++/CUDA extension (and, on a GPU, runs it).

`torch.utils.cpp_extension.load_inline` compiles one CUDA kernel with nvcc and one C++ binding
against torch's headers, links them and imports the module: the whole path a user's custom op
takes. Without a GPU the build and import are checked; with one the kernel's result is too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import time
from typing import Any

from _probekit import Recorder, main_for, probe_name, skip

NAME = probe_name(__file__)
PROBE = {
    "level": "static",
    "needs_gpu": False,
    "timeout_s": 600,
    "flavours": ["full"],
    "memory_bytes": 6_442_450_944,  # nvcc's cicc and ninja's parallel jobs
}

CUDA_SOURCE = r"""
#include <torch/extension.h>

__global__ void add_one_kernel(const float* in, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}

torch::Tensor add_one(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "a float CUDA tensor");
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    int64_t n = in.numel();
    add_one_kernel<<<(n + 255) / 256, 256>>>(in.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

CPP_SOURCE = "torch::Tensor add_one(torch::Tensor x);"


def nvcc_release(nvcc: str) -> str | None:
    """ "13.0" from `nvcc --version`."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"release (\d+\.\d+)", out.stdout)
    return found.group(1) if found else None


def target_arch(device: str, expected: dict[str, Any]) -> str:
    """One architecture to compile for: the GPU's own, else one the image promises."""
    import torch

    if device.startswith("cuda"):
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    archs = [a for a in expected.get("archs") or [] if a.startswith("sm_")]
    pick = "sm_90" if "sm_90" in archs else (archs[-1] if archs else "sm_90")
    digits = pick.removeprefix("sm_")
    return f"{digits[:-1]}.{digits[-1]}"


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    if torch.version.cuda is None:
        return skip(NAME, "a CPU build of torch: no CUDA compiler to check")
    from torch.utils import cpp_extension

    rec = Recorder(NAME, device)
    facts = rec.facts
    home = cpp_extension.CUDA_HOME
    facts["cuda_home"] = home
    nvcc = os.path.join(home, "bin", "nvcc") if home else None
    if not rec.check("nvcc is in CUDA_HOME", bool(nvcc and os.access(nvcc, os.X_OK)), str(nvcc)):
        return rec.report()
    assert nvcc is not None
    facts["nvcc"] = nvcc_release(nvcc)
    rec.equal("nvcc release matches torch.version.cuda", facts["nvcc"], torch.version.cuda)
    facts["ninja"] = shutil.which("ninja")
    if not rec.check(
        "ninja is on PATH (cpp_extension needs it)", bool(facts["ninja"]), str(facts["ninja"])
    ):
        return rec.report()
    # torch.compile on a GPU: Triton builds its launcher with a C compiler and Python's headers.
    python_h = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    facts["cc"] = shutil.which("gcc") or shutil.which("clang")
    rec.check(
        "Triton, a C compiler and Python.h are there for torch.compile",
        bool(facts["triton"] and facts["cc"] and os.path.exists(python_h)),
        f"triton {facts['triton']}, cc {facts['cc']}, {python_h}"
        + ("" if os.path.exists(python_h) else " missing"),
    )

    arch = target_arch(device, expected)
    facts["arch"] = arch
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    build = tempfile.mkdtemp(prefix="imagekit-ext-")
    started = time.monotonic()
    try:
        module = cpp_extension.load_inline(
            name="imagekit_add_one",
            cpp_sources=[CPP_SOURCE],
            cuda_sources=[CUDA_SOURCE],
            functions=["add_one"],
            build_directory=build,
            with_cuda=True,
            verbose=False,
        )
        rec.metric("extension_build_s", time.monotonic() - started)
        built = [f for f in os.listdir(build) if f.endswith(".so")]
        rec.check(
            f"extension built for sm_{arch.replace('.', '')} and imported",
            bool(built),
            built[0] if built else "",
        )
        if device.startswith("cuda"):
            x = torch.arange(1024, dtype=torch.float32, device=device)
            out = module.add_one(x)
            torch.cuda.synchronize()
            rec.check("the kernel computes x + 1", bool(torch.equal(out, x + 1)), "1024 values")
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
