"""DDP: one DistributedDataParallel step over two (or one-per-GPU) ranks in this container.

NCCL when there are two or more GPUs, gloo on the CPU otherwise. Each rank trains
on different data; the probe checks that gradients were averaged across ranks
and that every rank holds identical parameters afterwards. A rank that never
joins gives `timeout` after the init timeout, not a hang.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from _probekit import Recorder, main_for, probe_name, result

NAME = probe_name(__file__)
PROBE = {
    "needs_gpu": False,
    "shm_bytes": 1_073_741_824,  # a literal: the host reads it with ast
    "timeout_s": 240,
    "flavours": ["slim", "full"],
    "memory_bytes": 6_442_450_944,  # a process per rank, each with torch loaded
}

DEFAULT_INIT_TIMEOUT_S = 60
BUS_BYTES = 256 << 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _data(torch: Any, rank: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(100 + rank)
    return torch.randn(16, 4, generator=gen), torch.randn(16, 1, generator=gen)


def _model(torch: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1).double()


def worker(rank: int, world: int, port: int, backend: str, init_timeout_s: float) -> dict[str, Any]:
    """One rank: a DDP step; returns its gradients and whether parameters agree."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=init_timeout_s),
        )
    except Exception as exc:  # reported to the parent as data
        return {"rank": rank, "init_error": f"{type(exc).__name__}: {exc}"[:500]}
    model = _model(torch).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[rank] if backend == "nccl" else None
    )
    x, y = (t.double().to(device) for t in _data(torch, rank))
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    grads = [p.grad.detach().cpu().flatten().tolist() for p in model.parameters()]
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    report: dict[str, Any] = {"rank": rank, "grads": grads, "params_identical": same}
    if backend == "nccl":
        payload = torch.ones(BUS_BYTES // 4, device=device)
        for _ in range(3):
            dist.all_reduce(payload)
        torch.cuda.synchronize()
        started = time.perf_counter()
        runs = 10
        for _ in range(runs):
            dist.all_reduce(payload)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) / runs
        report["busbw_gbps"] = BUS_BYTES * 2 * (world - 1) / world / seconds / 1e9
    dist.destroy_process_group()
    return report


def _spawn_ranks(
    started: int, world: int, port: int, backend: str, init_timeout_s: float
) -> list[dict[str, Any]] | str:
    """Ranks as fresh processes (NCCL: CUDA must not be initialised before the fork)."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--worker",
                str(rank),
                str(world),
                str(port),
                backend,
                str(init_timeout_s),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(started)
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=init_timeout_s + 120)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            if not lines:
                return f"error: a rank exited {proc.returncode}: {err[-800:]}"
            reports.append(json.loads(lines[-1]))
    except subprocess.TimeoutExpired:
        return "timeout: ranks did not finish in time"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return reports


def _forked_rank(channel: Any, *args: Any) -> None:
    import torch

    # The parent's OpenMP pool does not survive fork; these tensors are tiny anyway.
    torch.set_num_threads(1)
    try:
        channel.put(worker(*args))
    except Exception as exc:  # reported to the parent as data
        channel.put({"rank": args[0], "error": f"{type(exc).__name__}: {exc}"[:800]})


def _fork_ranks(
    started: int, world: int, port: int, backend: str, init_timeout_s: float
) -> list[dict[str, Any]] | str:
    """Ranks forked from this process: torch is imported already, so they start at once."""
    import multiprocessing
    import queue

    context = multiprocessing.get_context("fork")
    channel = context.Queue()
    procs = [
        context.Process(
            target=_forked_rank,
            args=(channel, rank, world, port, backend, init_timeout_s),
            daemon=True,
        )
        for rank in range(started)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + init_timeout_s + 120
    reports: list[dict[str, Any]] = []
    try:
        while len(reports) < started:
            try:
                reports.append(channel.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                return "timeout: ranks did not finish in time"
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    failed = [r for r in reports if "error" in r]
    if failed:
        return f"error: rank {failed[0]['rank']} failed: {failed[0]['error']}"
    return sorted(reports, key=lambda r: int(r["rank"]))


def _expected_grads(torch: Any, world: int) -> list[list[float]]:
    """The average over ranks of each rank's local gradient: what DDP must produce."""
    total: list[Any] | None = None
    for rank in range(world):
        model = _model(torch)
        x, y = (t.double() for t in _data(torch, rank))
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        total = grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]
    assert total is not None
    return [(g / world).flatten().tolist() for g in total]


def can_fork(torch: Any, backend: str) -> bool:
    """Whether the ranks may be forked from this process: gloo only, and only while CUDA is
    not initialised here. Once a probe before this one ran autograd on a GPU, autograd's
    device threads exist and a forked rank's backward() refuses to run ("Unable to handle
    autograd's threading in combination with fork-based multiprocessing", seen on an H200)."""
    return backend == "gloo" and not torch.cuda.is_initialized()


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    backend = "nccl" if gpus >= 2 else "gloo"
    world = gpus if gpus >= 2 else 2
    rec = Recorder(NAME, device)
    rec.facts |= {"backend": backend, "world_size": world}
    if device.startswith("cuda") and gpus < 2:
        rec.facts["note"] = "one GPU: NCCL needs a GPU per rank, so the ranks use gloo on the CPU"
    init_timeout_s = float(
        expected.get("ddp_init_timeout_s")
        or DEFAULT_INIT_TIMEOUT_S * float(expected.get("time_scale") or 1)
    )
    # For the runner's own tests: start one rank fewer than the world, to prove a rank that
    # never joins ends in `timeout` instead of a hang.
    started_ranks = world - int(os.environ.get("IMAGEKIT_DDP_DROP_RANKS", "0"))
    port = _free_port()
    launch = _fork_ranks if can_fork(torch, backend) else _spawn_ranks
    reports = launch(started_ranks, world, port, backend, init_timeout_s)
    if isinstance(reports, str):
        status = "timeout" if reports.startswith("timeout") else "error"
        return result(NAME, status, reports.split(": ", 1)[-1], rec)
    init_errors = [r for r in reports if "init_error" in r]
    if init_errors:
        reason = f"rank {init_errors[0]['rank']} could not join within {init_timeout_s:.0f}s: "
        return result(NAME, "timeout", reason + init_errors[0]["init_error"], rec)

    want = _expected_grads(torch, world)
    for report in reports:
        err = max(
            abs(a - b)
            for got, exp in zip(report["grads"], want, strict=True)
            for a, b in zip(got, exp, strict=True)
        )
        rec.check(
            f"rank {report['rank']} gradients are the average over ranks",
            err < 1e-9,
            f"max abs difference {err:.2e}",
        )
        rec.check(
            f"rank {report['rank']} parameters identical on every rank",
            report["params_identical"],
            "after one SGD step",
        )
    local = _expected_grads(torch, 1)
    differs = max(
        abs(a - b) for g, w in zip(local, want, strict=True) for a, b in zip(g, w, strict=True)
    )
    rec.check(
        "ranks trained on different data",
        differs > 1e-6,
        f"rank 0's own gradient differs from the average by {differs:.2e}",
    )
    bus = [r["busbw_gbps"] for r in reports if "busbw_gbps" in r]
    if bus:
        rec.metric("allreduce_busbw_gbps", min(bus))
    return rec.report()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        rank, world, port, backend, timeout_s = sys.argv[2:7]
        print(json.dumps(worker(int(rank), int(world), int(port), backend, float(timeout_s))))
    else:
        main_for(NAME, run)
