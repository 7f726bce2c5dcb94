"""Every option of every command reaches the request its command makes.

Each command's Typer function turns its options into one frozen request (each feature's
`requests.py`) and hands it to `dispatch`, which calls `HANDLERS[type(request)]`. These tests
swap every handler for one that keeps the request, run each command with every option set to a
value other than its default, and compare the request field by field. A meta-test walks the
click command tree and fails when an option exists that no case below sets, so a new option
needs a case here.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import typer.main
from typer.testing import CliRunner

import imagekit.cli
from imagekit.audit.requests import AuditCommand
from imagekit.build.inputs import RenderInputs, RenderRequest
from imagekit.build.options import BuilderChoice, BuildNetwork, Compression
from imagekit.build.requests import (
    BakeRequest,
    BootstrapCommand,
    BuildCommand,
    BuildSettings,
    GcRequest,
)
from imagekit.cli import common, options
from imagekit.doctor.requests import DoctorRequest
from imagekit.hpc.export import ExportFormat
from imagekit.hpc.requests import ExportCommand
from imagekit.kernel.runtime import GpuChoice
from imagekit.kernel.vocabulary import Flavour, Platform, Runtime
from imagekit.matrix.requests import (
    CheckRequest,
    CompatRequest,
    ExplainRequest,
    MatrixFormat,
    MatrixRequest,
    SchemaRequest,
    TagsRequest,
)
from imagekit.matrix.selection import Selection
from imagekit.publish.attest import RequiredLevel
from imagekit.publish.requests import AttestVerifyRequest, PublishCommand, PublishSettings
from imagekit.serve.decide import Service
from imagekit.serve.requests import RunCommand
from imagekit.upstream.requests import CompatVerifyRequest, RefreshRequest
from imagekit.verify.probe_contract import ProbeDevice
from imagekit.verify.requests import (
    ProbeCommand,
    ProbeSettings,
    ReportRequest,
    VerifyCommand,
    VerifySettings,
)

ROOT = Path(__file__).resolve().parents[3]
CLI_DIR = ROOT / "imagekit" / "cli"
# Options of the root command that configure the program, not a request.
ROOT_OPTIONS = {"debug", "version", "install_completion", "show_completion"}
NO_DEFAULT = object()
# Where the requests live: each feature's `requests.py`, and the parts several share.
REQUEST_MODULES = (
    *(
        f"imagekit.{feature}.requests"
        for feature in (
            "audit",
            "build",
            "doctor",
            "hpc",
            "matrix",
            "publish",
            "serve",
            "upstream",
            "verify",
        )
    ),
    "imagekit.build.inputs",
    "imagekit.matrix.selection",
)


# Files the options point at ----------------------------------------------------------------


class Files(NamedTuple):
    """Paths under tmp_path, made to exist where a command might check them."""

    matrix: Path
    wheelhouse: Path
    ca: Path
    workspace: Path
    keys: Path
    probes_dir: Path
    results: Path
    nvidia_smi: Path
    out: Path
    run1: Path
    run2: Path


@pytest.fixture
def files(tmp_path: Path) -> Files:
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "examples" / "cpu.yaml", matrix)
    made = Files(
        matrix=matrix,
        wheelhouse=tmp_path / "wheels",
        ca=tmp_path / "ca.pem",
        workspace=tmp_path / "workspace",
        keys=tmp_path / "authorized_keys",
        probes_dir=tmp_path / "probes",
        results=tmp_path / "results",
        nvidia_smi=tmp_path / "nvidia-smi",
        out=tmp_path / "out",
        run1=tmp_path / "results" / "run1",
        run2=tmp_path / "results" / "run2",
    )
    for folder in (made.wheelhouse, made.workspace, made.probes_dir, made.run1, made.run2):
        folder.mkdir(parents=True)
    made.ca.write_text("-----BEGIN CERTIFICATE-----\nnot a real one\n", encoding="utf-8")
    made.keys.write_text("ssh-ed25519 AAAAC3Nza test@example\n", encoding="utf-8")
    made.nvidia_smi.write_text("#!/bin/sh\n", encoding="utf-8")
    return made


# The table: one command line per case and the request it must make -------------------------


class Line(NamedTuple):
    argv: list[str]
    expected: object
    env: dict[str, str] | None = None


def render_args(f: Files) -> list[str]:
    """Every option of RenderInputs, each non-default."""
    return [
        "--wheelhouse",
        str(f.wheelhouse),
        "--ca-cert",
        str(f.ca),
        "--no-ca-cert",
        "--pip-index-url",
        "https://pypi.mirror.example/simple",
        "--extra-index-url",
        "https://a.example/simple",
        "--extra-index-url",
        "https://b.example/simple",
        "--created",
        "2025-01-02T03:04:05Z",
        "--revision",
        "abc123",
        "--base-override",
        "ubuntu:24.04=imagekit-base/ubuntu:noble",
        "--base-override",
        "debian:12=imagekit-base/debian:bookworm",
    ]


def render_inputs(f: Files) -> RenderInputs:
    return RenderInputs(
        wheelhouse=f.wheelhouse,
        ca_cert=f.ca,
        no_ca_cert=True,
        pip_index_url="https://pypi.mirror.example/simple",
        extra_index_urls=("https://a.example/simple", "https://b.example/simple"),
        created="2025-01-02T03:04:05Z",
        revision="abc123",
        base_overrides=(
            "ubuntu:24.04=imagekit-base/ubuntu:noble",
            "debian:12=imagekit-base/debian:bookworm",
        ),
    )


def select_args(f: Files, flavour: str = "full") -> list[str]:
    return [
        "-m", str(f.matrix), "--only", "a", "--only", "b", "--flavour", flavour,
        "--platform", "linux/arm64",
    ]  # fmt: skip


def selection(f: Files, flavour: str = "full") -> Selection:
    return Selection(
        matrix=f.matrix, only=("a", "b"), flavour=Flavour(flavour), platform=Platform.ARM64
    )


def case_matrix(f: Files) -> Line:
    return Line(
        ["matrix", *select_args(f), "--format", "json"],
        MatrixRequest(selection=selection(f), format=MatrixFormat.json),
    )


def case_check(f: Files) -> Line:
    return Line(["check", "-m", str(f.matrix), "--json"], CheckRequest(matrix=f.matrix, json=True))


def case_render(f: Files) -> Line:
    return Line(
        [
            "render",
            *select_args(f),
            "--out",
            str(f.out),
            *render_args(f),
            "--buildkit",
            "--check",
            "--json",
        ],
        RenderRequest(
            selection=selection(f),
            inputs=render_inputs(f),
            out=f.out,
            buildkit=True,
            check=True,
            json=True,
        ),
    )


def case_compat(f: Files) -> Line:
    return Line(["compat", "--torch", "2.8.0", "--json"], CompatRequest(torch="2.8.0", json=True))


def case_compat_explain(f: Files) -> Line:
    return Line(
        [
            "compat",
            "explain",
            "--torch",
            "2.8.0",
            "--cuda",
            "12.8",
            "--python",
            "3.12",
            "--os",
            "ubuntu-24.04",
            "--json",
        ],
        ExplainRequest(torch="2.8.0", cuda="12.8", python="3.12", os="ubuntu-24.04", json=True),
    )


def case_matrix_refresh(f: Files) -> Line:
    return Line(
        [
            "matrix",
            "refresh",
            "-m",
            str(f.matrix),
            "--index",
            "http://127.0.0.1:1/simple",
            "--index",
            "http://127.0.0.1:2/simple",
            "--compat",
            str(f.ca),
            "--since",
            "2.13.0",
            "--write",
            "--json",
        ],
        RefreshRequest(
            matrix=f.matrix,
            indexes=("http://127.0.0.1:1/simple", "http://127.0.0.1:2/simple"),
            compat=f.ca,
            since="2.13.0",
            write=True,
            json=True,
        ),
    )


def case_compat_verify(f: Files) -> Line:
    return Line(
        [
            "compat",
            "verify",
            "--wheelhouse",
            str(f.wheelhouse),
            "--wheelhouse",
            str(f.out),
            "--compat",
            str(f.ca),
        ],
        CompatVerifyRequest(wheelhouses=(f.wheelhouse, f.out), compat=f.ca),
    )


def case_schema(f: Files) -> Line:
    out = f.out / "results.schema.json"
    return Line(["schema", "--results", "--out", str(out)], SchemaRequest(out=out, results=True))


def case_schema_attestation(f: Files) -> Line:
    out = f.out / "verify-predicate.schema.json"
    return Line(
        ["schema", "--attestation", "--out", str(out)], SchemaRequest(out=out, attestation=True)
    )


def case_tags(f: Files) -> Line:
    return Line(
        ["tags", *select_args(f), "--registry", "registry.example:5000/ml", "--json"],
        TagsRequest(selection=selection(f), registry="registry.example:5000/ml", json=True),
    )


def case_build(f: Files) -> Line:
    return Line(
        [
            "build",
            *select_args(f),
            "--builder",
            "buildx",
            "--jobs",
            "4",
            "--no-cache",
            "--keep-stages",
            "--fail-fast",
            "--pull",
            *render_args(f),
            "--label",
            "team=ml",
            "--label",
            "k=v",
            "--results",
            str(f.results),
            "--json",
            "--cache-from",
            "127.0.0.1:5000/cache/from",
            "--cache-to",
            "127.0.0.1:5000/cache/to",
            "--compression",
            "zstd",
            "--network",
            "none",
        ],
        BuildCommand(
            selection=selection(f),
            settings=BuildSettings(
                builder=BuilderChoice.BUILDX,
                jobs=4,
                no_cache=True,
                keep_stages=True,
                fail_fast=True,
                pull=True,
                labels=(("team", "ml"), ("k", "v")),
                cache_from="127.0.0.1:5000/cache/from",
                cache_to="127.0.0.1:5000/cache/to",
                compression=Compression.ZSTD,
                network=BuildNetwork.NONE,
                source_date_epoch=1700000000,
            ),
            inputs=render_inputs(f),
            results=f.results,
            json=True,
        ),
        {"SOURCE_DATE_EPOCH": "1700000000"},
    )


def case_bake(f: Files) -> Line:
    return Line(
        [
            "bake",
            *select_args(f, "slim"),
            "--out",
            str(f.out / "bake.json"),
            "--contexts",
            str(f.out / "contexts"),
            *render_args(f),
        ],
        BakeRequest(
            selection=selection(f, "slim"),
            inputs=render_inputs(f),
            out=f.out / "bake.json",
            contexts=f.out / "contexts",
        ),
    )


def case_base_bootstrap(f: Files) -> Line:
    return Line(
        [
            "base",
            "bootstrap",
            "--suite",
            "bookworm",
            "--tag",
            "imagekit-base/debian:bookworm",
            "--mirror",
            "http://snapshot.debian.org/archive/debian/20250101T000000Z",
            "--security-mirror",
            "http://snapshot.debian.org/archive/debian-security/20250101T000000Z",
            "--include",
            "python3,curl",
            "--variant",
            "apt",
            "--docs",
            "--arch",
            "arm64",
            "--packages-for",
            "full",
        ],
        BootstrapCommand(
            suite="bookworm",
            tag="imagekit-base/debian:bookworm",
            mirror="http://snapshot.debian.org/archive/debian/20250101T000000Z",
            security_mirror="http://snapshot.debian.org/archive/debian-security/20250101T000000Z",
            include=("python3", "curl"),
            packages_for=Flavour.FULL,
            variant="apt",
            docs=True,
            source_date_epoch=1700000000,
            arch="arm64",
        ),
        {"SOURCE_DATE_EPOCH": "1700000000"},
    )


def case_gc(f: Files) -> Line:
    return Line(
        ["gc", "--older-than", "2h", "--dry-run", "--run-id", "20250102-030405-abcd"],
        GcRequest(older_than_s=7200.0, dry_run=True, run_id="20250102-030405-abcd"),
    )


def case_verify(f: Files) -> Line:
    return Line(
        [
            "verify",
            *select_args(f, "slim"),
            "--gpus",
            "none",
            "--probes",
            "a,b",
            "--timeout-s",
            "90",
            "--shm-size",
            "1073741824",
            "--no-structure",
            "--probes-dir",
            str(f.probes_dir),
            "--nodes",
            "2",
            "--results",
            str(f.results),
            "--json",
        ],
        VerifyCommand(
            selection=selection(f, "slim"),
            images=(),
            settings=VerifySettings(
                gpus=GpuChoice.NONE,
                probes=("a", "b"),
                timeout_s=90.0,
                shm_bytes=1 << 30,
                structure=False,
                probes_dir=f.probes_dir,
                nodes=2,
            ),
            results=f.results,
            json=True,
        ),
    )


def case_verify_images(f: Files) -> Line:
    return Line(
        ["verify", "ghcr.io/acme/pytorch:a", "local/b:1", "--gpus", "all"],
        VerifyCommand(
            selection=Selection(),
            images=("ghcr.io/acme/pytorch:a", "local/b:1"),
            settings=VerifySettings(gpus=GpuChoice.ALL),
        ),
    )


def case_verify_slurm(f: Files) -> Line:
    argv = ["verify", "local/b:1", "--runtime", "charliecloud", "--slurm", "--nodes", "2"]
    return Line(
        [*argv, "--partition", "cpu", "--account", "ml", "--time-limit", "30",
         "--gpus-per-node", "4", "--pending-limit", "15"],
        VerifyCommand(
            selection=Selection(),
            images=("local/b:1",),
            settings=VerifySettings(
                runtime=Runtime.CHARLIECLOUD, slurm=True, nodes=2, partition="cpu",
                account="ml", time_limit_min=30, gpus_per_node=4, pending_limit_min=15,
            ),
        ),
    )  # fmt: skip


def case_export(f: Files) -> Line:
    out = f.workspace / "x.sqfs"
    return Line(
        ["export", "r/x:1", "--format", "squashfs", "--out", str(out), "--json"],
        ExportCommand("r/x:1", format=ExportFormat.SQUASHFS, out=out, json=True),
    )


def case_audit(f: Files) -> Line:
    return Line(
        [
            "audit",
            *select_args(f, "slim"),
            "--osv",
            str(f.out / "all.zip"),
            "--scanner-report",
            str(f.out / "trivy.json"),
            "--results",
            str(f.results),
            "--json",
        ],
        AuditCommand(
            selection=selection(f, "slim"),
            osv=f.out / "all.zip",
            scanner_report=f.out / "trivy.json",
            results=f.results,
            json=True,
        ),
    )


def case_audit_published(f: Files) -> Line:
    return Line(
        ["audit", "-m", str(f.matrix), "--published", "--registry", "localhost:5000",
         "--signing-key", str(f.keys)],
        AuditCommand(
            selection=Selection(matrix=f.matrix),
            published=True,
            registry="localhost:5000",
            signing_key=str(f.keys),
        ),
    )  # fmt: skip


def case_audit_images(f: Files) -> Line:
    return Line(
        ["audit", "ghcr.io/acme/pytorch:a"],
        AuditCommand(selection=Selection(), images=("ghcr.io/acme/pytorch:a",)),
    )


def case_probe(f: Files) -> Line:
    out = f.out / "probe.json"
    argv = ["probe", "--probes", "env,matmul", "--device", "cpu", "--timeout-s", "30"]
    return Line(
        [*argv, "--nodes", "3", "--out", str(out), "--json"],
        ProbeCommand(
            settings=ProbeSettings(
                probes=("env", "matmul"), device=ProbeDevice.CPU, timeout_s=30.0, nodes=3
            ),
            out=out,
            json=True,
        ),
    )


def case_report(f: Files) -> Line:
    return Line(
        ["report", str(f.run1), str(f.run2), "--results", str(f.results), "--threshold", "0.5"],
        ReportRequest(runs=(f.run1, f.run2), results=f.results, threshold=0.5),
    )


def case_report_html(f: Files) -> Line:
    return Line(
        ["report", "--results", str(f.results), "--html", str(f.out), "--threshold", "0.1"],
        ReportRequest(results=f.results, threshold=0.1, html=f.out),
    )


def case_publish_candidate(f: Files) -> Line:
    return Line(
        [
            "publish",
            *select_args(f),
            "--registry",
            "registry.example:5000/ml",
            "--dry-run",
            "--force",
            "--candidate",
            "ci-123",
            "--attempts",
            "7",
            "--backoff-s",
            "0.5",
            "--deadline-s",
            "42",
            "--results",
            str(f.results),
            "--json",
        ],
        PublishCommand(
            selection=selection(f),
            settings=PublishSettings(
                registry="registry.example:5000/ml", dry_run=True, force=True, candidate="ci-123"
            ),
            attempts=7,
            backoff_s=0.5,
            deadline_s=42.0,
            results=f.results,
            json=True,
        ),
    )


def case_publish_from_candidate(f: Files) -> Line:
    return Line(
        [
            "publish",
            "-m",
            str(f.matrix),
            "--from-candidate",
            "ci-456",
            "--patch",
            "--signing-key",
            str(f.keys),
        ],
        PublishCommand(
            selection=Selection(matrix=f.matrix),
            settings=PublishSettings(from_candidate="ci-456", patch=True),
            signing_key=str(f.keys),
        ),
    )


def case_publish_signing_key_from_the_environment(f: Files) -> Line:
    return Line(
        ["publish", "-m", str(f.matrix)],
        PublishCommand(selection=Selection(matrix=f.matrix), signing_key=str(f.keys)),
        {"IMAGEKIT_SIGNING_KEY": str(f.keys)},
    )


def case_attest_verify(f: Files) -> Line:
    return Line(
        [
            "attest",
            "verify",
            "127.0.0.1:5000/acme/pytorch:a",
            "--key",
            str(f.keys),
            "--require-level",
            "gpu",
            "--require-probe",
            "ddp",
            "--require-probe",
            "cudnn",
            "--require-audit-within",
            "7",
            "--require-no-pending",
            "--require-provenance",
            "--json",
        ],
        AttestVerifyRequest(
            image="127.0.0.1:5000/acme/pytorch:a",
            key=str(f.keys),
            require_level=RequiredLevel.GPU,
            require_probes=("ddp", "cudnn"),
            require_audit_within=7,
            require_no_pending=True,
            require_provenance=True,
            json=True,
        ),
    )


def case_run_command(f: Files) -> Line:
    return Line(
        [
            "run",
            "local/full:1",
            "--workspace",
            str(f.workspace),
            "--gpus",
            "none",
            "--port",
            "18888:8888",
            "--port",
            "2222:22",
            "--",
            "python",
            "-c",
            "print(1)",
        ],
        RunCommand(
            image="local/full:1",
            service=Service.COMMAND,
            command=("python", "-c", "print(1)"),
            workspace=f.workspace,
            gpus=GpuChoice.NONE,
            ports=((8888, 18888), (22, 2222)),
        ),
    )


def case_run_ssh(f: Files) -> Line:
    return Line(
        ["run", "local/full:1", "--ssh", "--authorized-keys", str(f.keys), "--gpus", "all"],
        RunCommand(
            image="local/full:1",
            service=Service.SSH,
            authorized_keys=f.keys,
            gpus=GpuChoice.ALL,
        ),
    )


def case_run_jupyter(f: Files) -> Line:
    return Line(
        ["run", "local/full:1", "--jupyter", "--port", "18888:8888", "--user", "4321:4321"],
        RunCommand(
            image="local/full:1", service=Service.JUPYTER, ports=((8888, 18888),), user="4321:4321"
        ),
    )


def case_run_tensorboard(f: Files) -> Line:
    return Line(
        ["run", "local/full:1", "--tensorboard"],
        RunCommand(image="local/full:1", service=Service.TENSORBOARD),
    )


def case_run_shell(f: Files) -> Line:
    return Line(
        ["run", "local/slim:1", "--shell", "--workspace", str(f.workspace)],
        RunCommand(image="local/slim:1", service=Service.SHELL, workspace=f.workspace),
    )


def case_doctor(f: Files) -> Line:
    return Line(
        [
            "doctor",
            "--image",
            "ghcr.io/acme/pytorch:a",
            "--image",
            "local/b:1",
            *select_args(f, "slim"),
            "--nvidia-smi",
            str(f.nvidia_smi),
            "--json",
            "--key",
            str(f.keys),
        ],
        DoctorRequest(
            images=("ghcr.io/acme/pytorch:a", "local/b:1"),
            matrix=f.matrix,
            only=("a", "b"),
            flavour=Flavour.SLIM,
            nvidia_smi=f.nvidia_smi,
            json=True,
            key=str(f.keys),
            platform=Platform.ARM64,
        ),
    )


CASES: list[Callable[[Files], Line]] = [
    case_matrix,
    case_check,
    case_render,
    case_compat,
    case_compat_explain,
    case_matrix_refresh,
    case_compat_verify,
    case_schema,
    case_schema_attestation,
    case_tags,
    case_build,
    case_bake,
    case_base_bootstrap,
    case_gc,
    case_verify,
    case_verify_images,
    case_verify_slurm,
    case_export,
    case_audit,
    case_audit_published,
    case_audit_images,
    case_probe,
    case_report,
    case_report_html,
    case_publish_candidate,
    case_publish_from_candidate,
    case_publish_signing_key_from_the_environment,
    case_attest_verify,
    case_run_command,
    case_run_ssh,
    case_run_jupyter,
    case_run_tensorboard,
    case_run_shell,
    case_doctor,
]


# Helpers -------------------------------------------------------------------------------------


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every handler replaced by one that keeps the request (so nothing real runs)."""
    found: list[object] = []
    for kind in list(common.HANDLERS):
        monkeypatch.setitem(common.HANDLERS, kind, found.append)
    return found


def invoke(argv: list[str], env: dict[str, str] | None = None) -> Any:
    # SOURCE_DATE_EPOCH and IMAGEKIT_RESULTS of the caller's shell must not leak in.
    clean = {"SOURCE_DATE_EPOCH": None, "IMAGEKIT_RESULTS": None, "IMAGEKIT_SIGNING_KEY": None}
    clean |= env or {}
    return CliRunner().invoke(imagekit.cli.app, argv, env=clean)


def leaves(value: object, prefix: str = "") -> Iterator[tuple[str, object, object]]:
    """(dotted field name, value, the field's default) of a request, nested parts flattened."""
    for field in dataclasses.fields(value):  # type: ignore[arg-type]
        name = prefix + field.name
        item = getattr(value, field.name)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            yield from leaves(item, name + ".")
            continue
        if field.default is not dataclasses.MISSING:
            default: object = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = NO_DEFAULT
        yield name, item, default


def same_type(got: object, want: object) -> bool:
    """The converted type arrived: exact types, element by element (an int is a float)."""
    if isinstance(want, tuple):
        return (
            isinstance(got, tuple)
            and len(got) == len(want)
            and all(same_type(g, w) for g, w in zip(got, want, strict=True))
        )
    if type(want) is float:
        return type(got) in (float, int)
    return type(got) is type(want)


def differences(got: object, want: object) -> list[str]:
    """Each field that did not arrive as wanted, with what arrived instead."""
    found = {name: value for name, value, _ in leaves(got)}
    return [
        f"{name}: wanted {value!r}, got {found.get(name)!r}"
        for name, value, _ in leaves(want)
        if found.get(name) != value or not same_type(found.get(name), value)
    ]


# Typer 0.29 carries its own copy of click (typer._click), whose groups are commands with a
# `commands` mapping rather than click.Group: the tree is walked by that mapping.
Command = Any


def subcommands(command: Command) -> dict[str, Command]:
    return dict(getattr(command, "commands", None) or {})


def command_tree() -> dict[str, Command]:
    """Every command by its words ("compat explain"); a group with options counts as one."""
    found: dict[str, Command] = {}

    def walk(group: Command, words: tuple[str, ...]) -> None:
        for name, command in subcommands(group).items():
            key = " ".join((*words, name))
            children = subcommands(command)
            if not children or command.params or getattr(command, "invoke_without_command", False):
                found[key] = command
            walk(command, (*words, name))

    root = typer.main.get_command(imagekit.cli.app)
    assert subcommands(root), "imagekit is a group of commands"
    walk(root, ())
    return found


def split(argv: list[str]) -> tuple[str, Command, list[str]]:
    """The command words of a command line, the command they name, and its arguments."""
    command = typer.main.get_command(imagekit.cli.app)
    words: list[str] = []
    rest = list(argv)
    while rest and rest[0] in subcommands(command):
        words.append(rest.pop(0))
        command = subcommands(command)[words[-1]]
    return " ".join(words), command, rest


def options_set(command: Command, args: list[str]) -> set[str]:
    """The parameters a command line sets, each to a value other than its default."""
    ctx = command.make_context("imagekit", list(args))
    chosen = set()
    for param in command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        if ctx.params[param.name] != param.get_default(ctx):
            chosen.add(param.name)
    return chosen


def cli_request_classes() -> set[type]:
    """The request classes the commands of imagekit/cli make (imagekit/cli/options.py)."""
    return set(options.COMMANDS)


# Tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__.removeprefix("case_"))
def test_every_option_reaches_the_request(
    case: Callable[[Files], Line], files: Files, captured: list[object]
) -> None:
    line = case(files)
    result = invoke(line.argv, line.env)
    assert result.exit_code == 0, (result.output, result.exception)
    assert len(captured) == 1, captured
    request = captured[0]
    assert type(request) is type(line.expected)
    assert differences(request, line.expected) == []


def test_candidate_and_from_candidate_are_refused(files: Files, captured: list[object]) -> None:
    result = invoke(
        ["publish", "-m", str(files.matrix), "--candidate", "a", "--from-candidate", "b"]
    )
    assert result.exit_code == 2
    assert "--from-candidate" in result.stderr
    assert captured == []


def test_a_level_that_is_no_level_is_refused(files: Files, captured: list[object]) -> None:
    argv = ["attest", "verify", "r/x:1", "--key", str(files.keys), "--require-level", "tpu"]
    result = invoke(argv)
    assert result.exit_code == 2
    # The error box, unwrapped; colourless (under GitHub Actions rich colours it).
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stderr)
    said = " ".join(plain.replace("│", " ").split())
    assert "'tpu' is not one of 'static', 'cpu', 'gpu'" in said
    assert captured == []


def test_verify_images_with_only_is_refused(captured: list[object]) -> None:
    result = invoke(["verify", "local/a:1", "--only", "x"])
    assert result.exit_code == 2
    assert "--only" in result.stderr
    assert captured == []


def test_the_table_sets_every_option_of_every_command(files: Files) -> None:
    """A command, or an option of one, that no case sets fails here: add a case for it."""
    tree = command_tree()
    covered: dict[str, set[str]] = {}
    for case in CASES:
        words, command, args = split(case(files).argv)
        assert words in tree, f"{case.__name__}: {words!r} is not a command"
        covered.setdefault(words, set()).update(options_set(command, args))
    missing = {
        words: sorted({p.name for p in command.params if p.name} - covered.get(words, set()))
        for words, command in tree.items()
    }
    assert {w: names for w, names in missing.items() if names} == {}
    root = typer.main.get_command(imagekit.cli.app)
    # An option of the root command reaches no request; only these may exist there.
    assert {p.name for p in root.params} <= ROOT_OPTIONS


def test_every_request_field_is_set_by_some_case(files: Files) -> None:
    """Each field with a default takes another value in at least one case of its request."""
    unset: dict[str, set[str]] = {}
    changed: dict[str, set[str]] = {}
    for case in CASES:
        expected = case(files).expected
        kind = type(expected).__name__
        for name, value, default in leaves(expected):
            if default is NO_DEFAULT or value != default:
                changed.setdefault(kind, set()).add(name)
            else:
                unset.setdefault(kind, set()).add(name)
    never = {kind: names - changed.get(kind, set()) for kind, names in unset.items()}
    assert {kind: sorted(names) for kind, names in never.items() if names} == {}


def test_every_dispatched_request_has_a_handler(files: Files) -> None:
    """Each request a command makes has its handler once imagekit.cli is imported."""
    dispatched = cli_request_classes()
    # Parts of requests: shared by several, or one command's nested settings.
    shared = {
        Selection,
        RenderInputs,
        BuildSettings,
        VerifySettings,
        PublishSettings,
        ProbeSettings,
    }
    defined = {
        value
        for module in REQUEST_MODULES
        for value in vars(importlib.import_module(module)).values()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == module
    }
    assert dispatched == defined - shared
    assert dispatched == {type(case(files).expected) for case in CASES}
    missing = [kind.__name__ for kind in dispatched if kind not in common.HANDLERS]
    assert missing == []
    assert all(callable(common.HANDLERS[kind]) for kind in dispatched)
