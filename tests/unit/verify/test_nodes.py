"""The multi-node DDP probe as the host sees it: its command, its results, verify over fakes,
and host mode across two local torchrun nodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from imagekit.adapters.hostprobe import HostProbeRunner
from imagekit.adapters.node_wait import wait_for_nodes
from imagekit.build.render import RenderOptions, image_labels
from imagekit.errors import InputError
from imagekit.kernel.records import ImageRecord, Status
from imagekit.matrix.compat import load_compat
from imagekit.matrix.load import load_matrix
from imagekit.resources import probes_dir
from imagekit.verify.ports import NodesRequest, NodesRun
from imagekit.verify.probe_contract import ProbeDevice
from imagekit.verify.probe_nodes import (
    NodeOutput,
    all_ranks_reported,
    combine_nodes,
    nccl_transport,
    nodes_command,
)
from imagekit.verify.probes import discover, multi_node, select
from imagekit.verify.requests import ProbeSettings, VerifySettings
from imagekit.verify.run import VerifyRun
from imagekit.verify.settings import Target
from imagekit.verify.summary import changes
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

ROOT = Path(__file__).resolve().parents[3]
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
    verify = VerifyRun.of(
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
    from imagekit.verify.hostprobe import probe_here

    run = probe_here(HostProbeRunner(), PROBES, ProbeSettings(("env",), ProbeDevice.CPU, nodes=2))
    result = next(r for r in run.output.results if r.probe == "ddp_nodes")
    assert result.status is Status.PASS, (result.reason, run.log[-3000:])
    assert result.facts["backend"] == "gloo" and result.facts["world_size"] == 2
    assert {c.name.split(":")[0] for c in result.checks} == {"node 0 rank 0", "node 1 rank 0"}


# Waiting for the nodes ---------------------------------------------------------------------


def _started(*scripts: str) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sh", "-c", script]) for script in scripts]


def _stopped(nodes: list[subprocess.Popen[bytes]]) -> None:
    for node in nodes:
        node.kill()
        node.wait()


def _everyone_reported(node: int) -> bool:
    return True


def _nobody_reported(node: int) -> bool:
    return False


def test_every_node_is_waited_for_until_it_ends() -> None:
    nodes = _started("sleep 0.2; exit 0", "sleep 0.6; exit 3")
    codes = wait_for_nodes(
        [n.poll for n in nodes], _nobody_reported, timeout_s=120, linger_s=0, poll_s=0.05
    )
    assert codes == [0, 3]


@pytest.mark.parametrize("first_end", [0, 134])
def test_nodes_that_reported_are_given_up_a_while_after_another_ended(first_end: int) -> None:
    # torchrun's exit barrier: the other agent left (or its rank aborted in its teardown after
    # reporting, 134), and this one would wait 300 s for it.
    nodes = _started(f"exit {first_end}", "sleep 120", "sleep 120")
    try:
        codes = wait_for_nodes(
            [n.poll for n in nodes], _everyone_reported, timeout_s=300, linger_s=0.5, poll_s=0.05
        )
        assert codes == [first_end, None, None]
        assert nodes[1].poll() is None and nodes[2].poll() is None  # given up on, not waited
    finally:
        _stopped(nodes)


def test_a_node_that_has_not_reported_is_given_its_whole_time() -> None:
    # It may be about to say what went wrong: nodes 1 and 2 end well past the linger.
    nodes = _started("exit 1", "sleep 1.5; exit 0", "sleep 1.5; exit 5")
    reported = [True, False, True]
    codes = wait_for_nodes(
        [n.poll for n in nodes], reported.__getitem__, timeout_s=120, linger_s=0.1, poll_s=0.05
    )
    assert codes == [1, 0, 5]


def test_no_node_is_given_up_before_one_has_ended() -> None:
    nodes = _started("sleep 1.5; exit 0", "sleep 1.5; exit 0")
    codes = wait_for_nodes(
        [n.poll for n in nodes], _everyone_reported, timeout_s=120, linger_s=0.1, poll_s=0.05
    )
    assert codes == [0, 0]


def test_a_node_running_at_the_time_limit_is_given_up() -> None:
    nodes = _started("sleep 120")
    try:
        codes = wait_for_nodes(
            [nodes[0].poll], _nobody_reported, timeout_s=0.3, linger_s=60, poll_s=0.05
        )
        assert codes == [None]
    finally:
        _stopped(nodes)


def test_host_nodes_that_reported_are_stopped_after_one_crashed_and_their_output_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in interpreter for torchrun, with a result line for its rank: the first node
    prints more than a pipe holds and aborts (a rank that crashed in its teardown), the other
    hangs after reporting, as an agent at torchrun's exit barrier does."""
    python = tmp_path / "python"
    rank = {"event": "rank", "status": "pass", "nonce": "NONCE"}
    rank["checks"] = [{"name": "the rank took its step", "ok": True}]
    (tmp_path / "rank.json").write_text(json.dumps(rank) + "\n")
    python.write_text(
        "#!/bin/sh\n"
        'sed "s/NONCE/$IMAGEKIT_PROBE_NONCE/" "$NODES_DIR/rank.json"\n'
        'if mkdir "$NODES_DIR/first" 2>/dev/null; then\n'
        "    head -c 200000 /dev/zero | tr '\\0' x; echo; exit 134\n"
        "fi\n"
        'echo "$$" > "$NODES_DIR/pid"; exec sleep 3600\n'
    )
    python.chmod(0o755)
    monkeypatch.setenv("NODES_DIR", str(tmp_path))
    request = NodesRequest(
        image="",
        probes_dir=PROBES,
        probe="ddp_nodes",
        nodes=2,
        nproc=1,
        device="cpu",
        gpus=False,
        timeout_s=300,
        init_timeout_s=60,
        linger_s=0.5,
        shm_bytes=0,
        memory_bytes=0,
    )
    run = HostProbeRunner(str(python)).run_nodes(request)
    crashed, hung = sorted(run.outputs, key=lambda output: output.timed_out)
    assert (crashed.exit_code, crashed.timed_out, len(crashed.stdout.splitlines()[1])) == (
        134,
        False,
        200000,
    )
    assert hung.timed_out and all_ranks_reported(hung.stdout, run.nonce, 1)
    result = combine_nodes("ddp_nodes", run.outputs, nproc=1, nonce=run.nonce)
    assert result.status is Status.PASS, result.reason  # every rank reported, and passed
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped, and reaped
