"""What each command is asked to do: one frozen value per command, the input of its use case.

Each field carries its command-line declaration (`Opt`, `Arg`: neutral metadata in `Annotated`)
beside its type and default, so an option is declared once; imagekit/cli/options.py turns a
request type into its command's signature and the values parsed back into the request. Pure
values and their checks: nothing here needs Docker, a registry or the CLI library.
"""

from __future__ import annotations

from imagekit.core.requests.build import (
    BakeRequest,
    BootstrapCommand,
    BuildCommand,
    GcRequest,
    cache_repository,
    duration_s,
)
from imagekit.core.requests.matrix import (
    CheckRequest,
    CompatRequest,
    CompatVerifyRequest,
    ExplainRequest,
    MatrixRequest,
    RefreshRequest,
    RenderRequest,
    SchemaRequest,
    TagsRequest,
)
from imagekit.core.requests.options import (
    Arg,
    Flags,
    FlavourChoice,
    MatrixFormat,
    Opt,
    PlatformChoice,
    comma_separated,
)
from imagekit.core.requests.publish import (
    LEVEL_NAMES,
    AttestVerifyRequest,
    DoctorRequest,
    PublishCommand,
    RunCommand,
)
from imagekit.core.requests.selection import (
    RenderInputs,
    Selection,
    base_override_pairs,
    pairs,
    uv_platforms,
)
from imagekit.core.requests.verify import (
    ProbeCommand,
    ReportRequest,
    VerifyCommand,
    positive,
    record_name,
)

__all__ = [
    "LEVEL_NAMES",
    "Arg",
    "AttestVerifyRequest",
    "BakeRequest",
    "BootstrapCommand",
    "BuildCommand",
    "CheckRequest",
    "CompatRequest",
    "CompatVerifyRequest",
    "DoctorRequest",
    "ExplainRequest",
    "Flags",
    "FlavourChoice",
    "GcRequest",
    "MatrixFormat",
    "MatrixRequest",
    "Opt",
    "PlatformChoice",
    "ProbeCommand",
    "PublishCommand",
    "RefreshRequest",
    "RenderInputs",
    "RenderRequest",
    "ReportRequest",
    "RunCommand",
    "SchemaRequest",
    "Selection",
    "TagsRequest",
    "VerifyCommand",
    "base_override_pairs",
    "cache_repository",
    "comma_separated",
    "duration_s",
    "pairs",
    "positive",
    "record_name",
    "uv_platforms",
]
