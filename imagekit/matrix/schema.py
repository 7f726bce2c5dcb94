"""The shape of matrix.yaml, as strict pydantic models.

These models only check shape and types; the meaning (does torch 2.8.0 have a
CUDA 11.8 build?) is checked in `imagekit.matrix.load`. The JSON Schema that editors
use is generated from these models (`imagekit schema`), and a test keeps the
committed copy in step.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from imagekit.kernel.json import JsonObject
from imagekit.kernel.vocabulary import Flavour, Platform, Threshold

SCHEMA_VERSION = 1

TorchVersion = Annotated[StrictStr, Field(pattern=r"^\d+\.\d+\.\d+$", examples=["2.8.0"])]
PythonVersion = Annotated[StrictStr, Field(pattern=r"^3\.\d+$", examples=["3.12"])]
CudaOrCpu = Annotated[StrictStr, Field(pattern=r"^(\d+\.\d+|cpu)$", examples=["12.8", "cpu"])]
GpuArch = Annotated[StrictStr, Field(pattern=r"^sm_\d+[a-z]?$", examples=["sm_90"])]
# The enum, with the schema it had as a Literal (no `$ref`): matrix.schema.json is unchanged.
FlavourName = Annotated[
    Flavour, WithJsonSchema({"enum": [f.value for f in Flavour], "type": "string"})
]
# Docker's platform names of the two architectures PyTorch ships Linux wheels for.
_ARCHS = "|".join(p.removeprefix("linux/") for p in Platform)
DockerPlatform = Annotated[
    StrictStr, Field(pattern=rf"^linux/({_ARCHS})$", examples=list(Platform))
]
PlatformList = Annotated[list[DockerPlatform], Field(min_length=1)]
Text = Annotated[StrictStr, Field(min_length=1)]


def _a_date(text: str) -> str:
    dt.date.fromisoformat(text)  # a ValueError is reported at the key, as bad input
    return text


IsoDate = Annotated[
    StrictStr,
    Field(pattern=r"^\d{4}-\d{2}-\d{2}$", examples=["2027-06-30"]),
    AfterValidator(_a_date),
]


Given = TypeVar("Given")


def _one_or_many(value: Given) -> Given | list[Given]:
    """Let `python: "3.12"` stand for `python: ["3.12"]`."""
    return [value] if isinstance(value, str | int | float | bool) else value


PythonList = Annotated[
    list[PythonVersion],
    BeforeValidator(_one_or_many),
    Field(min_length=1),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^3\.\d+$"},
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": r"^3\.\d+$"},
                    "minItems": 1,
                },
            ],
            "description": "One Python (major.minor) or a list of them.",
        }
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserSpec(_Strict):
    """The non-root user images run as."""

    name: Annotated[StrictStr, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "ml"
    uid: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] = 1000
    gid: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] = 100


class FlavourSpec(_Strict):
    """Settings of one flavour (slim or full)."""

    size_budget_bytes: Annotated[StrictInt, Field(gt=0)]
    packages: list[Text] = Field(
        default_factory=list, description="Extra pip requirements, pinned (name==version)."
    )
    required_probes: list[Text] = Field(
        default_factory=list, description="Probes that must pass before an image is published."
    )
    rdma: StrictBool = Field(
        default=False,
        description=(
            "Carry the user-space RDMA stack (libibverbs1, ibverbs-providers, rdma-core) so "
            "NCCL can use InfiniBand/RoCE between nodes instead of falling back to sockets."
        ),
    )
    nodes: Annotated[StrictInt, Field(ge=1, le=16)] = Field(
        default=1,
        description=(
            "More than 1: verify also runs the multi-node DDP probe (ddp_nodes) across this "
            "many containers of each image of this flavour, and publishing requires it."
        ),
    )
    compile: StrictBool = Field(
        default=True,
        description=(
            "torch.compile (inductor) works in the image: slim then carries a C++ compiler, "
            "Python's headers and torch's (about 0.2 GB). false (slim only): it carries none, "
            "says so in the io.imagekit.torch-compile label, and the first torch.compile names "
            'the ways out (backend="aot_eager", or the full image).'
        ),
    )
    leave_out: list[Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]] = Field(
        default_factory=list,
        description=(
            "slim only: distributions removed from the virtualenv after torch is installed "
            "(e.g. triton, which compiles kernels with a C compiler that slim does not carry). "
            "Their exact versions stay recorded in the image; the full flavour installs them."
        ),
    )


class Flavours(_Strict):
    """Both flavours; every cell is built in each of them unless an entry says otherwise."""

    slim: FlavourSpec
    full: FlavourSpec


class Defaults(_Strict):
    """Values an entry does not state."""

    os: Text
    python: PythonList | None = None
    platforms: PlatformList = Field(
        default_factory=lambda: [Platform.AMD64.value],
        description=(
            "Docker platforms every image is built for (linux/amd64, linux/arm64 for Grace "
            "Hopper and Grace Blackwell). Each versioned tag names an index of one image "
            "per platform."
        ),
    )


class Entry(_Strict):
    """One PyTorch release and the variants built for it."""

    torch: TorchVersion
    cuda: Annotated[list[CudaOrCpu], Field(min_length=1)]
    python: PythonList | None = None
    os: Text | None = None
    flavours: Annotated[list[FlavourName], Field(min_length=1)] = Field(
        default_factory=lambda: list(Flavour)
    )
    allow_experimental: StrictBool = False
    name: Text | None = Field(
        default=None, description="Prefix of the cell ids (default: the torch version)."
    )
    gpu_archs: list[GpuArch] | None = Field(
        default=None, description="GPU architectures this entry must run on (checked)."
    )
    platforms: PlatformList | None = Field(
        default=None, description="Docker platforms of this entry (default: defaults.platforms)."
    )
    end_of_patch: IsoDate | None = Field(
        default=None,
        description=(
            "The last day this release's images are patched (YYYY-MM-DD): after it, publish "
            "--patch refuses them, the security workflow rebuilds none, and the page marks "
            "their tags unsupported."
        ),
    )


class Selector(_Strict):
    """Picks cells by their versions; unset fields match anything."""

    torch: TorchVersion | None = None
    cuda: CudaOrCpu | None = None
    python: PythonVersion | None = None


class Latest(Selector):
    """The cell the `latest` tags point at; must match exactly one cell."""

    torch: TorchVersion
    cuda: CudaOrCpu


class Exclusion(Selector):
    """Images not to build, each with the reason why."""

    flavour: FlavourName | None = Field(default=None, title="Flavour")  # as the Literal had it
    reason: Text


class SecuritySpec(_Strict):
    """What `imagekit audit` and the publish gate refuse (docs/how-to/audit.md)."""

    refuse: Annotated[
        Threshold, WithJsonSchema({"enum": [t.value for t in Threshold], "type": "string"})
    ] = Field(
        default=Threshold.ANY_FIX,
        description=(
            "What fails an image: any-fix (a pending fix of any severity: a rebuild takes it), "
            "critical, high, medium or low (a finding of that severity or worse), or none."
        ),
    )
    allowlist: Text | None = Field(
        default=None,
        description=(
            "A YAML file of accepted findings, relative to this file: a list of id, package, "
            "reason and expires (YYYY-MM-DD). No reason, or past its expiry: bad input."
        ),
    )
    mirror: Text | None = Field(
        default=None,
        description=(
            "Read the security suite (SUITE-security) from this mirror instead of the "
            "distribution's own (security.debian.org, security.ubuntu.com)."
        ),
    )
    keyring: Text | None = Field(
        default=None,
        description=(
            "The keyring that signs the mirror's suites, relative to this file (default: the "
            "distribution's archive keyring)."
        ),
    )


class MatrixFile(_Strict):
    """matrix.yaml: the images a team publishes."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    schema_version: Literal[1]
    repository: Text = Field(
        description="Repository the tags belong to, e.g. ghcr.io/acme/pytorch."
    )
    source: Text | None = Field(default=None, description="URL of the repo holding this file.")
    tag_prefix: StrictStr = Field(default="", description="Prepended to every tag.")
    bases: dict[str, Text | dict[DockerPlatform, Text]] = Field(
        description=(
            "Base image per OS name (pin by digest in production): one reference (a "
            "multi-platform image), or one per Docker platform (e.g. locally bootstrapped bases)."
        )
    )
    defaults: Defaults
    user: UserSpec = Field(default_factory=UserSpec)
    flavours: Flavours
    releases: Annotated[list[Entry], Field(min_length=1)]
    latest: Latest
    exclude: list[Exclusion] = Field(default_factory=list)
    security: SecuritySpec | None = Field(
        default=None,
        description=(
            "What `imagekit audit` refuses, and with it the publish gate: a matrix that has this "
            "section publishes only images whose audit passes. Without it, audit takes the "
            "defaults and publish does not audit."
        ),
    )


def json_schema() -> JsonObject:
    """The JSON Schema of matrix.yaml (draft 2020-12)."""
    schema = MatrixFile.model_json_schema()
    schema["title"] = "imagekit matrix"
    return schema


def json_schema_text() -> str:
    """The JSON Schema of matrix.yaml as `imagekit schema` prints it."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
