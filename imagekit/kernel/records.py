"""The records imagekit writes and reads back: probe results, verify and publish records. Pure.

Frozen pydantic models: a probe's JSON line, a file under `results/<run-id>/`, is parsed once at
the boundary and travels as a typed value from there on (gate, levels, report, summary).
`imagekit/data/results.schema.json` is generated from `ImageRecord` (`make schema`), so the
schema and the code cannot drift apart.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from imagekit.kernel.json import JsonObject, JsonObjectField
from imagekit.kernel.vocabulary import (
    BuilderName,
    Ecosystem,
    FindingOrigin,
    FindingVerdict,
    Flavour,
    Runtime,
    Severity,
    Threshold,
)

SHA256 = r"^sha256:[0-9a-f]{64}$"
METRIC_NAME = r"_(ms|s|tflops|gbps|bytes|error|count)$"


class Status(StrEnum):
    """A probe's outcome. The probes' own list (`probes/_probekit.py`) must equal this one."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"
    TIMEOUT = "timeout"

    @property
    def bad(self) -> bool:
        """Whether this outcome fails a required probe (a skip, with its reason, does not)."""
        return self in BAD


BAD = frozenset({Status.FAIL, Status.ERROR, Status.TIMEOUT})


class Level(StrEnum):
    """The levels of verification, lowest first. `static` inspects the image's stack without a
    workload, `cpu` runs the workloads on the CPU, `gpu` on a GPU. Each probe belongs to one."""

    STATIC = "static"
    CPU = "cpu"
    GPU = "gpu"


LEVELS: tuple[Level, ...] = tuple(Level)
Reached = Literal["none", "static", "cpu", "gpu"]


class LevelState(StrEnum):
    """How one level went for one image."""

    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not run"
    NOT_APPLICABLE = "n/a"  # the gpu level of a CPU image


class Verdict(StrEnum):
    """What verify concluded for one image: every required probe and check held, or not."""

    PASS = "pass"
    FAIL = "fail"

    @classmethod
    def of(cls, ok: bool) -> Verdict:
        """PASS when `ok`."""
        return cls.PASS if ok else cls.FAIL


# The schema of a verdict as it was when the field was a Literal: the enum changes no JSON.
VerdictField = Annotated[
    Verdict, WithJsonSchema({"enum": ["pass", "fail"], "title": "Status", "type": "string"})
]
FlavourField = Annotated[
    Flavour,
    WithJsonSchema({"enum": [f.value for f in Flavour], "title": "Flavour", "type": "string"}),
]


class Record(BaseModel):
    """Base of every record: immutable, and no field the model does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> JsonObject:
        """The record as it is written to disk."""
        return self.model_dump(mode="json")


class Check(Record):
    """One check: its name, whether it held, and what was seen."""

    name: Annotated[str, StringConstraints(min_length=1)]
    ok: bool
    detail: str = ""


MetricName = Annotated[str, StringConstraints(pattern=METRIC_NAME)]


class ProbeResult(Record):
    """One probe's report (the protocol of `probes/README.md`).

    `pass` needs at least one check and every check ok: a probe that checked nothing has
    proven nothing.
    """

    schema_version: Literal[1] = 1
    probe: Annotated[str, StringConstraints(min_length=1)]
    status: Status
    reason: str = ""
    device: str = ""
    checks: tuple[Check, ...] = ()
    metrics: dict[MetricName, float] = Field(default_factory=dict)
    facts: JsonObjectField = Field(default_factory=dict)
    duration_s: Annotated[float, Field(ge=0)] = 0.0

    @model_validator(mode="after")
    def _pass_is_proven(self) -> ProbeResult:
        if self.status is Status.PASS and (not self.checks or not all(c.ok for c in self.checks)):
            raise ValueError("a pass needs at least one check, and every check ok")
        return self

    @classmethod
    def synthetic(cls, probe: str, status: Status, reason: str) -> ProbeResult:
        """A result the host writes for a probe that did not report one itself."""
        return cls(probe=probe, status=status, reason=reason)

    @property
    def failed_checks(self) -> list[Check]:
        """The checks that did not hold."""
        return [c for c in self.checks if not c.ok]


class Timings(Record):
    """How long verifying one image took."""

    container_start_s: float
    probe_wall_s: float
    verify_wall_s: float
    timeout_s: float
    timed_out: bool


class VerifyRecord(Record):
    """What `imagekit verify` found for one image (the `verify` section of its record)."""

    image_id: Annotated[str, StringConstraints(pattern=SHA256)]
    reference: str
    labels: dict[str, str]
    size_bytes: int = 0
    # The image's platform as the engine reports it (`linux/amd64`); "" when it did not say.
    platform: str = ""
    # What ran the probes: the engine's containers, or an HPC runtime on the exported image.
    runtime: Runtime = Runtime.DOCKER
    # Whether the probes ran through emulation (an arm64 image on an x86_64 engine): proof of
    # the image's contents and CPU behaviour, not of its speed.
    emulated: bool = False
    # The CPU qemu emulated (`neoverse-n2`, as Grace): what torch and inductor saw.
    emulated_cpu: str = ""
    device: str
    device_reason: str = ""
    level: Reached = "none"
    levels: dict[Level, LevelState] = Field(default_factory=dict)
    status: VerdictField
    required_probes: tuple[str, ...] = ()
    # The levels the required probes belong to: each must pass for the gate to open.
    required_levels: tuple[Level, ...] = ()
    probes: Annotated[tuple[ProbeResult, ...], Field(min_length=1)]
    structure: tuple[Check, ...] = ()
    labels_agree: tuple[Check, ...] = ()
    timings: Timings

    def result(self, probe: str) -> ProbeResult | None:
        """The result of `probe`, if it ran."""
        return next((r for r in self.probes if r.probe == probe), None)

    @property
    def inspection(self) -> tuple[Check, ...]:
        """The host-side checks: structure, and labels against the compatibility data."""
        return (*self.structure, *self.labels_agree)

    @property
    def env_facts(self) -> JsonObject:
        """The versions the env probe saw inside the image (empty if it did not run)."""
        env = self.result("env")
        return dict(env.facts) if env else {}


class LayerSize(Record):
    """One of an image's largest layers."""

    size_bytes: int
    created_by: str


class Material(Record):
    """A file from outside the render that a build context carried (a wheel, the installer,
    the CA bundle), by its name in the context: what SLSA calls a resolved dependency."""

    name: str  # wheelhouse/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class BuildStatus(StrEnum):
    """What `imagekit build` did with one image."""

    BUILT = "built"
    UP_TO_DATE = "up-to-date"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def ok(self) -> bool:
        """Built or up to date (and, since a build over budget is FAILED, within budget)."""
        return self in (BuildStatus.BUILT, BuildStatus.UP_TO_DATE)


class BuildRecord(Record):
    """What `imagekit build` did for one image (the `build` section of its record)."""

    # Also what `BuildRun` returns and `imagekit build` prints (a table row, or --json):
    # one type from the build to the file, built once when the image's outcome is known.
    name: str
    reference: str
    flavour: FlavourField
    # Inlined in the schema as the enum of its values, as it was before it was a StrEnum.
    status: Annotated[
        BuildStatus,
        WithJsonSchema(
            {"enum": [s.value for s in BuildStatus], "title": "Status", "type": "string"}
        ),
    ]
    message: str
    image_id: Annotated[str, StringConstraints(pattern=SHA256)] | None = None
    input_hash: Annotated[str, StringConstraints(pattern=SHA256)] | None = None
    size_bytes: Annotated[int, Field(ge=0)] | None = None
    size_budget_bytes: int | None = None
    layer_count: int | None = None
    largest_layers: tuple[LayerSize, ...] = ()
    duration_s: Annotated[float, Field(ge=0)]
    log_path: str | None = None
    builder: BuilderName | None = None  # the run's (None in records made before it was kept)
    builder_why: str | None = None  # "BuildKit: the buildx plugin 0.13.1 on Docker 26.1.5"
    parent_id: Annotated[str, StringConstraints(pattern=SHA256)] | None = None  # FROM's image id
    materials: tuple[Material, ...] = ()  # the external files of its context (provenance)

    @property
    def ok(self) -> bool:
        """Built or up to date, and within budget."""
        return self.status.ok


class PlanRecord(Record):
    """The plan an image was built from (the `plan` section of its record)."""

    name: str
    reference: str
    tag: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_][a-z0-9_.-]{0,127}$")]
    aliases: tuple[str, ...] = ()
    flavour: FlavourField
    cell: JsonObjectField
    required_probes: tuple[str, ...] = ()
    size_budget_bytes: int | None = None


HEX64 = r"^sha256:[0-9a-f]{64}$"


class Seal(Record):
    """The integrity check of a verify section, written beside it in the same file.

    `digest` is the SHA-256 of the canonical JSON of `{"image_id": ..., "verify": ...}`
    (`verify/integrity.py`): it catches a record edited by hand or cut short, but anyone can
    compute it again. `hmac` is an HMAC-SHA256 of the same bytes with a key only the verify
    host holds (`IMAGEKIT_RESULTS_KEY`), which a deliberate edit cannot recompute.
    """

    schema_version: Literal[1] = 1
    image_id: Annotated[str, StringConstraints(pattern=SHA256)]
    digest: Annotated[str, StringConstraints(pattern=HEX64)]
    hmac: Annotated[str, StringConstraints(pattern=r"^hmac-sha256:[0-9a-f]{64}$")] | None = None
    key_id: str | None = None  # which key: the first 16 hex digits of its SHA-256


class AuditFinding(Record):
    """One finding of an audit, and what it meant for the image."""

    id: str  # CVE-…, GHSA-…, PYSEC-…; a pending OS fix: `<source>@<fixed version>`
    package: str
    installed: str
    fixed: str = ""  # the version that fixes it; "" where none exists yet
    severity: Severity
    origin: FindingOrigin
    ecosystem: Ecosystem
    source: str = ""  # an OS package's source package
    verdict: FindingVerdict
    allowlist: str = ""  # the entry that accepts it (or that it outdated), as file:line
    reason: str = ""  # that entry's reason


class SecurityIndexRecord(Record):
    """The distribution's security suite an audit read, as its signed InRelease gave it."""

    suite: str  # bookworm-security
    url: str  # its InRelease
    date: str  # the InRelease's Date
    packages_sha256: str  # of the Packages index InRelease signs


class AuditRecord(Record):
    """What `imagekit audit` found for one image (the `audit` section of its record)."""

    image_id: Annotated[str, StringConstraints(pattern=SHA256)]
    reference: str
    audited_at: str  # ISO 8601, UTC
    distro: str  # debian-12 (os-release)
    security_index: SecurityIndexRecord
    threshold: Threshold
    status: VerdictField
    os_packages: int
    python_packages: int
    sources: tuple[str, ...]  # what was read: security-index, osv:PATH, trivy:PATH, grype:PATH
    findings: tuple[AuditFinding, ...] = ()
    problems: tuple[str, ...] = ()  # outdated allowlist entries, each with its remedy
    end_of_patch: str | None = None  # YYYY-MM-DD: the release's last day of patches (matrix)

    @property
    def pending_fixes(self) -> tuple[AuditFinding, ...]:
        """The findings a rebuild would fix."""
        return tuple(f for f in self.findings if f.fixed)

    @property
    def unsupported(self) -> bool:
        """Whether its release was past its end of patch when it was audited: nothing
        rebuilds it any more."""
        return self.end_of_patch is not None and self.audited_at[:10] > self.end_of_patch


class ImageRecord(Record):
    """`results/<run-id>/images/<image>.json`: what each stage of one run did to one image."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        title="imagekit image record (results/<run-id>/images/<image>.json)",
        json_schema_extra={"minProperties": 1},
    )

    plan: PlanRecord | None = None
    build: BuildRecord | None = None
    verify: VerifyRecord | None = None
    seal: Seal | None = None  # of the verify section (written with it)
    audit: AuditRecord | None = None
    audit_seal: Seal | None = None  # of the audit section (written with it)

    def to_json(self) -> JsonObject:
        """Only the sections the run wrote (a section keeps its own empty fields)."""
        return {name: section.to_json() for name, section in self if section is not None}


def results_schema() -> JsonObject:
    """The JSON Schema of an image record, as `imagekit/data/results.schema.json` holds it."""
    schema = ImageRecord.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://imagekit.dev/schemas/results.schema.json",
        **schema,
    }


def results_schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(results_schema(), indent=2, sort_keys=True) + "\n"
