"""Probes as the host sees them (pure): metadata, expected values, and the runner's output.

A probe's metadata is the `PROBE = {...}` literal of its file, read with `ast`
so the host never imports torch. The in-container runner (`probes/_runner.py`)
prints one JSON line per event; `parse_events` turns them into one result per
probe, and a probe that started but never reported becomes `timeout` or
`error`, never a pass.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pydantic

from imagekit.errors import InputError
from imagekit.kernel.json import JsonObject
from imagekit.kernel.records import LEVELS, Level, ProbeResult, Status, Verdict
from imagekit.kernel.vocabulary import Flavour
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations

DEFAULT_PROBES = (
    "env",
    "cuda_stack",
    "autograd",
    "matmul",
    "higher_order",
    "compile",
    "ddp",
    "cudnn",
    "cuda_extension",
)
RUNNER = "_runner.py"
DEFAULT_MEMORY_BYTES = 3 << 30


@dataclass(frozen=True)
class ProbeSpec:
    """A probe's metadata. Its name is its file's name: `probes/matmul.py` is `matmul`."""

    name: str
    needs_gpu: bool
    timeout_s: float
    flavours: tuple[Flavour, ...]
    shm_bytes: int = 0
    level: Level = Level.CPU
    # Memory the probe's process needs at most (a container's limit is the largest of its
    # probes', plus its shared memory and scratch space).
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    # More than 1: the probe runs across this many nodes under torchrun (`--nodes`), never in
    # the one-process runner.
    nodes: int = 1


def read_spec(path: Path) -> ProbeSpec:
    """The `PROBE` literal of one probe file, without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PROBE" for t in node.targets
        ):
            try:
                data = ast.literal_eval(node.value)
            except ValueError as exc:
                raise InputError(
                    f"{path}:{node.lineno}: PROBE must be a plain literal ({exc})",
                    "write numbers and strings out; no expressions",
                ) from None
            needs_gpu = bool(data.get("needs_gpu", False))
            level = str(data.get("level", "gpu" if needs_gpu else "cpu"))
            if level not in set(Level):
                raise InputError(
                    f"{path}:{node.lineno}: PROBE level {level!r} is not one of "
                    f"{', '.join(LEVELS)}",
                    "static: inspects without a workload; cpu: runs on a CPU; gpu: needs a GPU",
                )
            flavours = data.get("flavours", list(Flavour))
            if unknown := [f for f in flavours if f not in set(Flavour)]:
                raise InputError(
                    f"{path}:{node.lineno}: PROBE flavours {unknown} are not among "
                    f"{', '.join(Flavour)}"
                )
            return ProbeSpec(
                name=path.stem,
                needs_gpu=needs_gpu,
                level=Level(level),
                timeout_s=float(data.get("timeout_s", 120)),
                flavours=tuple(Flavour(f) for f in flavours),
                shm_bytes=int(data.get("shm_bytes", 0)),
                memory_bytes=int(data.get("memory_bytes", DEFAULT_MEMORY_BYTES)),
                nodes=int(data.get("nodes", 1)),
            )
    raise InputError(f"{path} has no PROBE = {{...}} literal")


def discover(folder: Path) -> dict[str, ProbeSpec]:
    """Every probe in `folder` (files not starting with `_`), by name."""
    specs = {}
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_"):
            spec = read_spec(path)
            specs[spec.name] = spec
    return specs


def select(available: Mapping[str, ProbeSpec], asked: list[str] | None) -> list[ProbeSpec]:
    """The one-node probes to run, in the order asked (default: all, in DEFAULT_PROBES order).

    A multi-node probe is run across nodes (`--nodes`), not here: asking for it by name is an
    error that says so, and the default leaves it out.
    """
    single = {n: s for n, s in available.items() if s.nodes == 1}
    names = asked or [n for n in DEFAULT_PROBES if n in single] + sorted(
        set(single) - set(DEFAULT_PROBES)
    )
    unknown = [n for n in names if n not in available]
    if unknown:
        raise InputError(
            f"unknown probe(s): {', '.join(unknown)}",
            f"available: {', '.join(sorted(available))}",
        )
    across = [n for n in names if n not in single]
    if across:
        raise InputError(
            f"{', '.join(across)} runs across nodes, not in one container",
            f"run it with --nodes {available[across[0]].nodes}",
        )
    return [available[n] for n in names]


def multi_node(available: Mapping[str, ProbeSpec]) -> ProbeSpec:
    """The probe that runs across nodes (`ddp_nodes`)."""
    found = [s for s in available.values() if s.nodes > 1]
    if not found:
        raise InputError(
            "no multi-node probe in the probes folder",
            "copy imagekit's probes/ddp_nodes.py beside your probes",
        )
    return found[0]


def runner_command(
    python: str,
    probes_dir: str,
    probes: list[str],
    expected: ProbeExpectations,
    device: ProbeDevice,
    nonce_file: str = "",
) -> list[str]:
    """The command line that runs `probes` through the runner, in a container or here.

    `nonce_file` holds the run's nonce; the runner reads and removes it before any probe runs.
    """
    command = [
        python,
        f"{probes_dir}/{RUNNER}",
        "--device",
        str(device),
        "--probes",
        ",".join(probes),
        "--expected",
        json.dumps(expected.to_json(), sort_keys=True),
    ]
    return [*command, "--nonce-file", nonce_file] if nonce_file else command


@dataclass(frozen=True)
class RunnerOutput:
    """What the runner said: the device it chose and one result per probe."""

    device: str
    device_reason: str
    results: tuple[ProbeResult, ...]


def result_from(event: JsonObject) -> ProbeResult:
    """A result line as a typed result; a malformed line is the probe's `error`, never a crash."""
    name = str(event.get("probe") or "?")
    try:
        return ProbeResult.model_validate(event)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "result"
        return ProbeResult.synthetic(
            name, Status.ERROR, f"the probe reported a malformed result ({where}: {first['msg']})"
        )


def nonce_events(text: str, nonce: str) -> Iterator[JsonObject]:
    """The runner's event lines in `text` that carry the run's `nonce` (which is removed): a
    line a probe printed itself, or another run's, is no event."""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.pop("nonce", "") == nonce:
            yield event


def parse_events(
    text: str,
    probes: list[str],
    *,
    timed_out: bool = False,
    exit_code: int | None = None,
    stderr: str = "",
    nonce: str = "",
) -> RunnerOutput:
    """One result per asked probe from the runner's stdout, whatever happened to it.

    Only lines that carry the run's `nonce` are events, and a result counts only for the probe
    that is running (the last `start`), once: no probe can report for another. A probe that
    started and never reported gets `timeout` when the run was killed for time, else `error`
    naming the exit code and the last stderr line; a probe that never started gets the same
    status with "not reached".
    """
    device, reason = "", ""
    results: dict[str, ProbeResult] = {}
    started: list[str] = []
    for event in nonce_events(text, nonce):
        kind = event.pop("event", None)
        if kind == "device":
            device, reason = str(event.get("device", "")), str(event.get("reason", ""))
        elif kind == "start":
            started.append(str(event.get("probe")))
        elif kind == "result" and started and event.get("probe") == started[-1]:
            results.setdefault(started[-1], result_from(event))
    last_err = next((x for x in reversed(stderr.strip().splitlines()) if x.strip()), "")
    ordered = []
    for probe in probes:
        if probe in results:
            ordered.append(results[probe])
            continue
        was_running = bool(started) and started[-1] == probe
        if timed_out:
            why = "the run hit its time limit" + (" in this probe" if was_running else "")
            status = Status.TIMEOUT
        else:
            why = f"the probe process died (exit code {exit_code})"
            if last_err:
                why += f": {last_err[-300:]}"
            status = Status.ERROR
        ordered.append(
            ProbeResult.synthetic(probe, status, why if was_running else "not reached: " + why)
        )
    return RunnerOutput(device, reason, tuple(ordered))


def overall(results: Sequence[ProbeResult], required: Sequence[str] | None = None) -> Verdict:
    """pass when every required probe (default: all) passed or was skipped for a reason."""
    considered = [r for r in results if required is None or r.probe in required]
    return Verdict.of(not any(r.status.bad for r in considered))
