"""The multi-node DDP probe as the host sees it: its command, its results, verify over fakes,
and host mode across two local torchrun nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.core.compat import load_compat
from imagekit.core.matrix import load_matrix
from imagekit.core.ports import NodesRequest, NodesRun
from imagekit.core.probe_nodes import NodeOutput, combine_nodes, nccl_transport, nodes_command
from imagekit.core.probes import discover, multi_node, select
from imagekit.core.records import ImageRecord, Status
from imagekit.core.render import RenderOptions, image_labels
from imagekit.core.summary import changes
from imagekit.errors import InputError
from imagekit.orchestration.verify import VerifyRun
from imagekit.orchestration.verify_settings import Target, VerifySettings
from imagekit.resources import probes_dir
from tests.fakes import (
    Events,
    FakeEngine,
    FakeInspector,
    FakeProbeRunner,
    image_id,
    nodes_run,
    passing,
    store,
    verify_record,
)
from tests.host_torch import needs_torch

ROOT = Path(__file__).resolve().parents[1]
PROBES = probes_dir()
CPU_FACTS = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"}


def rank_line(node: int, nonce: str, status: str = "pass") -> str:
    result = passing("ddp_nodes", {"backend": "gloo", "transport": "TCP", "node": node})
    if status != "pass":
        result = result.model_copy(update={"status": Status(status), "reason": "why"})
    return json.dumps({**result.to_json(), "event": "rank", "nonce": nonce}) + "\n"


def test_the_multi_node_probe_is_left_out_of_one_container_and_refused_there_by_name() -> None:
    specs = discover(PROBES)
    assert specs["ddp_nodes"].nodes == 2 and multi_node(specs).name == "ddp_nodes"
    assert "ddp_nodes" not in [s.name for s in select(specs, None)]
    with pytest.raises(InputError) as caught:
        select(specs, ["env", "ddp_nodes"])
    assert "runs across nodes" in caught.value.message and "--nodes 2" in caught.value.hint


def test_every_node_runs_torchrun_with_a_c10d_rendezvous_at_the_first_node() -> None:
    command = nodes_command(
        "python3",
        "/imagekit/probes",
        "ddp_nodes",
        nodes=2,
        nproc=1,
        endpoint="run-node0:29400",
        run_id="run",
        device="cpu",
        init_timeout_s=120,
    )
    text = " ".join(command)
    assert text.startswith("python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 1")
    assert "--rdzv-backend c10d --rdzv-endpoint run-node0:29400 --rdzv-id run" in text
    assert "--max-restarts 0 /imagekit/probes/ddp_nodes.py --device cpu" in text


def test_every_rank_of_every_node_passing_is_a_pass_with_each_ranks_checks() -> None:
    outputs = [NodeOutput(n, rank_line(n, "n1"), "", 0, False) for n in (0, 1)]
    result = combine_nodes("ddp_nodes", outputs, nproc=1, nonce="n1")
    assert result.status is Status.PASS
    assert [c.name for c in result.checks] == [
        "node 0 rank 0: ddp_nodes works",
        "node 1 rank 0: ddp_nodes works",
    ]
    assert result.facts["nodes"] == 2 and result.facts["transport"] == "TCP"


def test_a_node_that_never_joined_within_the_limit_is_a_timeout_naming_it() -> None:
    outputs = [
        NodeOutput(0, "", "", None, True),
        NodeOutput(1, "", "", None, True),
    ]
    result = combine_nodes("ddp_nodes", outputs, nproc=1, nonce="n1")
    assert result.status is Status.TIMEOUT
    assert "node 0 never joined within the limit" in result.reason


def test_a_rendezvous_that_timed_out_is_a_timeout() -> None:
    stderr = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    outputs = [NodeOutput(0, "", stderr, 1, False), NodeOutput(1, "", "", None, True)]
    result = combine_nodes("ddp_nodes", outputs, nproc=1, nonce="n1")
    assert result.status is Status.TIMEOUT and "a node never joined" in result.reason


def test_a_node_that_crashed_is_an_error_reported_on_that_node() -> None:
    outputs = [
        NodeOutput(0, rank_line(0, "n1", "error"), "", 1, False),
        NodeOutput(1, "", "Traceback ...\nSystemExit: boom on node 1\n", 3, False),
    ]
    result = combine_nodes("ddp_nodes", outputs, nproc=1, nonce="n1")
    assert result.status is Status.ERROR
    assert "node 1 exited 3 without a result: SystemExit: boom on node 1" in result.reason


def test_lines_without_the_runs_nonce_are_not_results() -> None:
    outputs = [NodeOutput(n, rank_line(n, "forged"), "", 0, False) for n in (0, 1)]
    result = combine_nodes("ddp_nodes", outputs, nproc=1, nonce="n1")
    assert result.status is Status.ERROR


@pytest.mark.parametrize(
    "log,facts",
    [
        (
            "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.2",
            {"transport": "IB"},
        ),
        (
            "h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
            {"transport": "Socket", "interface": "eth0"},
        ),
        (
            "h:1:2 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (libnccl-net-ofi.so)\n"
            "h:1:2 [0] NCCL INFO Using network Libfabric",
            {"transport": "Libfabric", "nccl_net_plugin": "libnccl-net-ofi.so"},
        ),
        ("nothing from NCCL here", {}),
    ],
)
def test_the_transport_nccl_used_is_read_from_its_debug_lines(log: str, facts: dict) -> None:
    assert nccl_transport(log) == facts


def test_report_flags_a_transport_that_changed_between_runs() -> None:
    def record(transport: str) -> dict[str, ImageRecord]:
        result = passing("ddp_nodes", {"transport": transport})
        return {"a-slim": ImageRecord(verify=verify_record(result))}

    assert changes(record("IB"), record("Socket")) == [
        "a-slim ddp_nodes: transport was IB, now Socket"
    ]


# Verify over the fakes ------------------------------------------------------------------


def verify_with(
    tmp_path: Path,
    runner: FakeProbeRunner,
    nodes: int = 1,
    target_nodes: int = 1,
    by_name: bool = False,
):
    plan = next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")
    engine = FakeEngine()
    engine.add(plan.reference, image_id(plan.reference), image_labels(plan, RenderOptions()))
    runner.env_facts = CPU_FACTS
    verify = VerifyRun(
        engine,
        runner,
        FakeInspector(),
        store(tmp_path),
        VerifySettings(probes_dir=PROBES, nodes=nodes),
        Events(),
        load_compat(),
    )
    target = Target(plan.name, plan.reference, plan.required_probes, target_nodes)
    if by_name:  # `imagekit verify IMAGE --nodes N`: no matrix, no required probes given
        target = Target(plan.name, plan.reference)
    return verify.execute([target])[plan.name]


def test_verify_with_nodes_runs_the_multi_node_probe_and_records_it(tmp_path: Path) -> None:
    runner = FakeProbeRunner()
    record = verify_with(tmp_path, runner, nodes=2)
    [request] = runner.node_requests
    assert request.nodes == 2 and request.probe == "ddp_nodes" and request.device == "cpu"
    assert request.labels["io.imagekit.run-id"]
    result = record.result("ddp_nodes")
    assert result is not None and result.status is Status.PASS
    assert record.status == "pass" and record.level == "cpu"


def test_without_nodes_the_multi_node_probe_does_not_run(tmp_path: Path) -> None:
    runner = FakeProbeRunner()
    record = verify_with(tmp_path, runner)
    assert runner.node_requests == [] and record.result("ddp_nodes") is None


def test_a_matrix_flavour_with_nodes_makes_the_probe_run_and_required(tmp_path: Path) -> None:
    def one_node_missing(request: NodesRequest) -> NodesRun:
        return nodes_run(request, passing_nodes=1, timed_out=True)

    runner = FakeProbeRunner(nodes_script=one_node_missing)
    record = verify_with(tmp_path, runner, target_nodes=2)
    assert "ddp_nodes" in record.required_probes
    result = record.result("ddp_nodes")
    assert result is not None and result.status is Status.TIMEOUT
    assert "node 1 never joined" in result.reason
    assert record.status == "fail"


def test_verify_image_with_nodes_counts_the_multi_node_probe(tmp_path: Path) -> None:
    """By name, the required probes come from the image's labels, which never name the
    multi-node probe: run because --nodes asked for it, it counts all the same."""

    def one_node_missing(request: NodesRequest) -> NodesRun:
        return nodes_run(request, passing_nodes=1, timed_out=True)

    runner = FakeProbeRunner(nodes_script=one_node_missing)
    record = verify_with(tmp_path, runner, nodes=2, by_name=True)
    assert "ddp_nodes" in record.required_probes and record.status == "fail"


# Host mode across two local nodes --------------------------------------------------------


@needs_torch
def test_host_mode_runs_ddp_across_two_local_torchrun_nodes() -> None:
    from imagekit.adapters.hostprobe import HostProbeRunner
    from imagekit.orchestration.hostprobe import probe_here

    run = probe_here(HostProbeRunner(), PROBES, ["env"], "cpu", None, nodes=2)
    result = next(r for r in run.output.results if r.probe == "ddp_nodes")
    assert result.status is Status.PASS, (result.reason, run.log[-3000:])
    assert result.facts["backend"] == "gloo" and result.facts["world_size"] == 2
    assert {c.name.split(":")[0] for c in result.checks} == {"node 0 rank 0", "node 1 rank 0"}
