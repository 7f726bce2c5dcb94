"""DDP across nodes, as torchrun runs it: one training step over every rank of every node.

Not run by `_runner.py`: the host starts this file under `torchrun --nnodes N
--nproc-per-node M --rdzv-backend c10d --rdzv-endpoint NODE0:PORT` on each node (a container
of the image per node on a network of their own, or processes of this machine in host mode).
Each rank trains on its own data; the checks are that gradients were averaged across every
rank of every node and that all ranks hold identical parameters afterwards. NCCL when the ranks
have GPUs, gloo over TCP otherwise. Every rank prints one `rank` event line with the run's
nonce (IMAGEKIT_PROBE_NONCE); the host combines them (imagekit.verify.probes.combine_nodes).
A rank that cannot join the process group in time reports `timeout`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _probekit import Recorder, probe_name

NAME = probe_name(__file__)
PROBE = {
    "level": "cpu",
    "needs_gpu": False,
    "nodes": 2,  # runs across this many nodes; only with `--nodes` (or the matrix's `nodes`)
    "shm_bytes": 1_073_741_824,
    "timeout_s": 300,
    "flavours": ["slim", "full"],
    "memory_bytes": 4_294_967_296,
}
DEFAULT_INIT_TIMEOUT_S = 120


def _data(torch: Any, rank: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(32, 8, generator=gen), torch.randn(32, 1, generator=gen)


def _model(torch: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)
    ).double()


def expected_grads(torch: Any, world: int) -> list[list[float]]:
    """The average over all ranks of each rank's local gradient: what DDP must produce."""
    total: list[Any] | None = None
    for rank in range(world):
        model = _model(torch)
        x, y = (t.double() for t in _data(torch, rank))
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        total = grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]
    assert total is not None
    return [(g / world).flatten().tolist() for g in total]


def _interface() -> str:
    """The interface gloo's TCP pairs use: GLOO_SOCKET_IFNAME, else the hostname's address."""
    named = os.environ.get("GLOO_SOCKET_IFNAME")
    if named:
        return named
    try:
        return f"{socket.gethostname()} ({socket.gethostbyname(socket.gethostname())})"
    except OSError:
        return socket.gethostname()


def step(rec: Recorder, rank: int, world: int, node: int, init_timeout_s: float) -> None:
    """Join the process group torchrun set up, take one DDP step, check it."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = rec.device.startswith("cuda") and torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}" if cuda else "cpu"
    rec.facts |= {"backend": backend, "world_size": world, "node": node, "rank": rank}
    rec.facts["transport"] = "NCCL (see the host's reading of NCCL_DEBUG)" if cuda else "TCP"
    if not cuda:
        rec.facts["interface"] = _interface()
    dist.init_process_group(backend, timeout=timedelta(seconds=init_timeout_s))
    model = _model(torch).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local_rank] if cuda else None
    )
    x, y = (t.double().to(device) for t in _data(torch, rank))
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    grads = [p.grad.detach().cpu().flatten().tolist() for p in model.parameters()]
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    # Plain tensors, not all_gather_object: that needs numpy, which slim images do not carry.
    nodes_seen = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(nodes_seen, torch.tensor([node], dtype=torch.int64, device=device))
    dist.destroy_process_group()
    want = expected_grads(torch, world)
    err = max(
        abs(a - b)
        for got, exp in zip(grads, want, strict=True)
        for a, b in zip(got, exp, strict=True)
    )
    rec.check(
        "gradients are the average over every rank of every node",
        err < 1e-9,
        f"max abs difference {err:.2e}",
    )
    same = all(torch.equal(gathered[0], g) for g in gathered)
    rec.check("parameters identical on every rank after the step", same, "after one SGD step")
    distinct = sorted({int(n.item()) for n in nodes_seen})
    rec.check("ranks of every node took part", len(distinct) >= 2, f"nodes {distinct}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init-timeout-s", type=float, default=DEFAULT_INIT_TIMEOUT_S)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    node = int(os.environ.get("GROUP_RANK", "0"))
    # The run's nonce comes in the environment: this file is the only code the run starts.
    nonce = os.environ.get("IMAGEKIT_PROBE_NONCE", "")
    channel = sys.stdout
    rec = Recorder(NAME, args.device)
    status_override = None
    try:
        step(rec, rank, world, node, args.init_timeout_s)
    except Exception as exc:  # reported as data: a rank that could not join, or a crash
        text = f"{type(exc).__name__}: {exc}"[:500]
        timed_out = "timeout" in text.lower() or "timed out" in text.lower()
        status_override = ("timeout" if timed_out else "error", text)
    report = rec.report()
    if status_override is not None:
        report["status"], report["reason"] = status_override
    event = {"event": "rank", "nonce": nonce, **report, "probe": NAME}
    channel.write(json.dumps(event, sort_keys=True) + "\n")
    channel.flush()
    return {"pass": 0, "fail": 1, "timeout": 3}.get(report["status"], 2)


if __name__ == "__main__":
    sys.exit(main())
