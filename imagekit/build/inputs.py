"""The inputs that shape a rendered Dockerfile and its context, and the request of
`imagekit render`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from imagekit.kernel.options import JSON, Opt
from imagekit.matrix.selection import Selection, pairs

if TYPE_CHECKING:  # imported lazily: `imagekit probe` must not load jinja2
    from imagekit.build.context import ContextInputs
    from imagekit.build.render import RenderOptions
    from imagekit.matrix.plan import ImagePlan


@dataclass(frozen=True)
class RenderRequest:
    """Write a Dockerfile and build context per image (one folder each)."""

    selection: Selection
    inputs: RenderInputs
    out: Annotated[Path, Opt("--out", help="Folder for the build contexts.", after="matrix")] = (
        Path("out")
    )
    buildkit: Annotated[
        bool,
        Opt(
            "--buildkit/--no-buildkit",
            help="Render BuildKit syntax (cache, secrets).",
            after="extra_index_urls",
        ),
    ] = False
    check: Annotated[
        bool, Opt("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False
    json: Annotated[bool, JSON] = False


def uv_platforms(plans: Iterable[ImagePlan]) -> set[str]:
    """The platforms whose builder stage runs uv: those of the slim images (full installs its
    packages with its slim's own pip)."""
    return {p.platform for p in plans if not p.flavour.workstation}


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

    def resolve(
        self,
        *,
        buildkit: bool,
        environ: Mapping[str, str] | None = None,
        foreign: tuple[tuple[str, Path], ...] = (),
    ) -> tuple[RenderOptions, ContextInputs]:
        """Check the inputs and turn them into render options and context files; `foreign`:
        the uv binary for each platform this machine emulates (the caller finds them)."""
        from imagekit.build.context import ContextInputs, check_wheelhouse, resolve_ca_bundle
        from imagekit.build.render import RenderOptions

        ca = None if self.no_ca_cert else resolve_ca_bundle(self.ca_cert, environ)
        if self.wheelhouse is not None:
            # An empty one would only fail at build time, as an obscure `COPY failed`.
            check_wheelhouse(self.wheelhouse)
        example, shape = "ubuntu:24.04=imagekit-base/ubuntu:noble", "IMAGE=LOCAL_IMAGE"
        overrides = pairs("--base-override", self.base_overrides, example, shape, whole=True)
        options = RenderOptions(
            wheelhouse=self.wheelhouse is not None,
            ca_bundle=ca is not None,
            pip_index_url=self.pip_index_url,
            extra_index_urls=self.extra_index_urls,
            buildkit=buildkit,
            created=self.created,
            revision=self.revision,
            base_overrides=overrides,
        )
        return options, ContextInputs(
            wheelhouse=self.wheelhouse, ca_bundle=ca, foreign_installers=foreign
        )
