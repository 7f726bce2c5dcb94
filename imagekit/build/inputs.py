"""The inputs that shape a rendered Dockerfile and its context, and the request of
`imagekit render` (`build.context.resolve_inputs` turns the inputs into render options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.kernel.options import JSON, Opt
from imagekit.matrix.selection import Selection


@dataclass(frozen=True)
class RenderRequest:
    """Write a Dockerfile and build context per image (one folder each)."""

    selection: Selection
    inputs: RenderInputs
    out: Annotated[Path, Opt("--out", help="Folder for the build contexts.")] = Path("out")
    buildkit: Annotated[
        bool,
        Opt("--buildkit/--no-buildkit", help="Render BuildKit syntax (cache, secrets)."),
    ] = False
    check: Annotated[
        bool, Opt("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class RenderInputs:
    """The options that shape a rendered Dockerfile and its context (render, build, bake)."""

    wheelhouse: Annotated[
        Path | None, Opt("--wheelhouse", help="Install from these wheels only (offline).")
    ] = None
    ca_cert: Annotated[
        Path | None,
        Opt(
            "--ca-cert",
            help="Extra CA bundle for pip (builder stages only). "
            "Default: $PIP_CERT, $SSL_CERT_FILE or $REQUESTS_CA_BUNDLE.",
        ),
    ] = None
    no_ca_cert: Annotated[bool, Opt("--no-ca-cert", help="Use no extra CA bundle.")] = False
    pip_index_url: Annotated[
        str | None, Opt("--pip-index-url", help="Mirror for every package index.")
    ] = None
    extra_index_urls: Annotated[
        tuple[str, ...],
        Opt("--extra-index-url", help="Additional package index (repeatable)."),
    ] = ()
    created: Annotated[str | None, Opt("--created", help="org.opencontainers.image.created")] = None
    revision: Annotated[str | None, Opt("--revision", help="org.opencontainers.image.revision")] = (
        None
    )
    base_overrides: Annotated[
        tuple[str, ...],
        Opt(
            "--base-override",
            help="Use a local base instead: IMAGE=LOCAL_IMAGE (repeatable).",
        ),
    ] = ()
