"""Matmul: a 1000x1000 product and its backward, checked against float64; GEMM TFLOP/s on GPUs."""

from __future__ import annotations

import statistics
import time
from typing import Any

from _probekit import Recorder, main_for, probe_name

NAME = probe_name(__file__)
PROBE = {
    "needs_gpu": False,
    "timeout_s": 300,
    "flavours": ["slim", "full"],
}

SIZE = 1000
WARM_RUNS = 10
GEMM_N = 8192
GEMM_RUNS = 10


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _step(torch: Any, a: Any, b: Any, device: str) -> float:
    started = time.perf_counter()
    a.grad = b.grad = None
    out = a @ b
    out.sum().backward()
    _sync(torch, device)
    return (time.perf_counter() - started) * 1000


def _gemm_tflops(torch: Any, rec: Recorder, dtype: Any, label: str, tf32: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype)
    for _ in range(3):  # warm-up: cuBLAS picks its kernel on the first calls
        a @ b
    torch.cuda.synchronize()
    times_ms = []
    for _ in range(GEMM_RUNS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times_ms.append(start.elapsed_time(end))
    median_ms = statistics.median(times_ms)
    tflops = 2 * GEMM_N**3 / (median_ms / 1000) / 1e12
    rec.metric(f"gemm_{label}_tflops", tflops)
    rec.check(f"gemm {label} ran", tflops > 0, f"{tflops:.1f} TFLOP/s (median of {GEMM_RUNS})")


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    rec = Recorder(NAME, device)
    torch.manual_seed(0)
    a = torch.randn(SIZE, SIZE, device=device, requires_grad=True)
    b = torch.randn(SIZE, SIZE, device=device, requires_grad=True)
    cold_ms = _step(torch, a, b, device)
    warm = [_step(torch, a, b, device) for _ in range(WARM_RUNS)]
    rec.metric("matmul_cold_ms", cold_ms)
    rec.metric("matmul_warm_median_ms", statistics.median(warm))

    # Reference in float64 on the CPU: d(sum(A@B))/dA = 1 @ B^T, d/dB = A^T @ 1.
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    ones = torch.ones(SIZE, SIZE, dtype=torch.float64)
    product = (a.detach() @ b.detach()).double().cpu()
    err = ((product - a64 @ b64).abs().max() / (a64 @ b64).abs().max()).item()
    rec.check("A @ B matches float64", err < 1e-3, f"max relative error {err:.2e}")
    assert a.grad is not None and b.grad is not None
    ga = (a.grad.double().cpu() - ones @ b64.T).abs().max().item()
    gb = (b.grad.double().cpu() - a64.T @ ones).abs().max().item()
    scale = max(1.0, (ones @ b64.T).abs().max().item())
    rec.check("dL/dA = 1 B^T", ga / scale < 1e-3, f"max relative error {ga / scale:.2e}")
    rec.check("dL/dB = A^T 1", gb / scale < 1e-3, f"max relative error {gb / scale:.2e}")

    if device.startswith("cuda"):
        previous = torch.backends.cuda.matmul.allow_tf32
        try:
            _gemm_tflops(torch, rec, torch.bfloat16, "bf16", False)
            _gemm_tflops(torch, rec, torch.float16, "fp16", False)
            _gemm_tflops(torch, rec, torch.float32, "tf32", True)
            _gemm_tflops(torch, rec, torch.float32, "fp32", False)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        rec.facts["gemm_size"] = f"{GEMM_N}x{GEMM_N}x{GEMM_N}"
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
