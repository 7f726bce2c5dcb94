"""A probe across nodes as the host sees it (pure): the command each node runs (torchrun's
rendezvous), and the nodes' outputs combined into one result per rank, with what went wrong on
which node."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from imagekit.kernel.json import JsonObject
from imagekit.kernel.records import Check, ProbeResult, Status
from imagekit.verify.probes import nonce_events, result_from

RDZV_PORT = 29400


def nodes_command(
    python: str,
    probes_dir: str,
    probe: str,
    *,
    nodes: int,
    nproc: int,
    endpoint: str,
    run_id: str,
    device: str,
    init_timeout_s: float,
) -> list[str]:
    """The torchrun command line every node runs for a multi-node probe: a c10d rendezvous at
    `endpoint` (HOST:PORT, where the first node's torchrun keeps the store), no restarts."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        f"join_timeout={int(init_timeout_s)}",
        "--max-restarts",
        "0",
        f"{probes_dir}/{probe}.py",
        "--device",
        device,
        "--init-timeout-s",
        str(int(init_timeout_s)),
    ]


@dataclass(frozen=True)
class NodeOutput:
    """What one node of a multi-node run printed, and how it ended."""

    node: int
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool


# NCCL_DEBUG=INFO names the network it chose: "NET/IB : Using [0]mlx5_0:1/IB",
# "NET/Socket : Using [0]eth0:10.0.0.2<0>", or a plugin ("NET/Plugin: Loaded ... aws-ofi-nccl").
_NCCL_NET = re.compile(r"NCCL INFO (?:NET/(?P<net>[A-Za-z0-9_-]+)|Using network (?P<using>\S+))")
_NCCL_IF = re.compile(r"NET/Socket : Using \[\d+\](?P<ifname>[^:\s]+)")
_NCCL_PLUGIN = re.compile(r"NET/Plugin.*?(?P<plugin>libnccl-net[\w.-]*\.so[\w.]*)")


def nccl_transport(log: str) -> dict[str, str]:
    """Which network NCCL used, from its NCCL_DEBUG=INFO lines; empty when it said nothing."""
    facts: dict[str, str] = {}
    for line in log.splitlines():
        if (m := _NCCL_PLUGIN.search(line)) is not None:
            facts["nccl_net_plugin"] = m.group("plugin")
        if (m := _NCCL_NET.search(line)) is not None:
            net = m.group("using") or m.group("net")
            if net not in ("Plugin",):
                facts["transport"] = net
        if (m := _NCCL_IF.search(line)) is not None:
            facts["interface"] = m.group("ifname")
    return facts


def all_ranks_reported(stdout: str, nonce: str, nproc: int) -> bool:
    """Whether a node's output so far holds a result line of each of its `nproc` ranks."""
    return sum(event.get("event") == "rank" for event in nonce_events(stdout, nonce)) >= nproc


def _rank_results(probe: str, output: NodeOutput, nonce: str) -> list[ProbeResult]:
    """The results the ranks of one node reported (lines with the run's `nonce` only)."""
    return [
        result_from({**event, "probe": probe})
        for event in nonce_events(output.stdout, nonce)
        if event.pop("event", None) == "rank"
    ]


def _node_problems(
    output: NodeOutput, mine: list[ProbeResult], nproc: int
) -> list[tuple[Status, str]]:
    """What went wrong on one node: ranks that never reported, and ranks that did not pass."""
    problems: list[tuple[Status, str]] = []
    if len(mine) < nproc:
        if output.timed_out:
            what = "never joined" if not mine else "did not finish"
            problems.append((Status.TIMEOUT, f"node {output.node} {what} within the limit"))
        elif "RendezvousTimeoutError" in output.stderr:
            why = f"node {output.node}: the rendezvous timed out: a node never joined"
            problems.append((Status.TIMEOUT, why))
        else:
            last = next((x for x in reversed(output.stderr.strip().splitlines()) if x.strip()), "")
            problems.append(
                (
                    Status.ERROR,
                    f"node {output.node} exited {output.exit_code} without a result"
                    + (f": {last[-300:]}" if last else ""),
                )
            )
    bad = [r for r in mine if r.status is not Status.PASS]
    return problems + [(r.status, f"node {output.node} rank: {r.reason}") for r in bad]


def combine_nodes(
    probe: str, outputs: Sequence[NodeOutput], *, nproc: int, nonce: str, device: str = ""
) -> ProbeResult:
    """One result for a multi-node run: every rank of every node must report a pass.

    A node whose ranks did not all report is named: `timeout` when the run hit its time
    limit (it never joined, or hung), else `error` with its exit code and last stderr line.
    """
    ranks = {o.node: _rank_results(probe, o, nonce) for o in outputs}
    problems = [p for o in outputs for p in _node_problems(o, ranks[o.node], nproc)]
    checks = tuple(
        Check(name=f"node {o.node} rank {i}: {c.name}", ok=c.ok, detail=c.detail)
        for o in outputs
        for i, r in enumerate(ranks[o.node])
        for c in r.checks
    )
    facts: JsonObject = {"nodes": len(outputs), "nproc_per_node": nproc}
    first = next((r for o in outputs for r in ranks[o.node]), None)
    if first is not None:
        facts |= {k: v for k, v in first.facts.items() if k not in ("node", "rank")}
    facts |= nccl_transport("\n".join(o.stdout + o.stderr for o in outputs))
    duration = max((r.duration_s for rs in ranks.values() for r in rs), default=0.0)
    if problems:
        order = [Status.TIMEOUT, Status.ERROR, Status.FAIL, Status.SKIP]
        status = min((s for s, _ in problems), key=order.index)
        reason = "; ".join(why for _, why in problems)[:1000]
        return ProbeResult(
            probe=probe,
            status=status,
            reason=reason,
            device=device,
            checks=checks,
            facts=facts,
            duration_s=duration,
        )
    return ProbeResult(
        probe=probe,
        status=Status.PASS,
        device=device,
        checks=checks,
        facts=facts,
        duration_s=duration,
    )
