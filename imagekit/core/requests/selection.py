"""Which images of which matrix, and the inputs that shape a rendered Dockerfile: the parts
the requests of several commands share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from imagekit.core.requests.options import FLAVOUR, MATRIX, ONLY, PLATFORM, Opt
from imagekit.errors import InputError

if TYPE_CHECKING:  # imported lazily: `imagekit probe` must not load jinja2
    from imagekit.core.context import ContextInputs
    from imagekit.core.matrix import Matrix
    from imagekit.core.plan import ImagePlan
    from imagekit.core.render import RenderOptions


@dataclass(frozen=True)
class Selection:
    """Which images of which matrix: `--matrix`, `--only`, `--flavour`, `--platform`."""

    matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")
    only: Annotated[tuple[str, ...], ONLY] = ()
    flavour: Annotated[str | None, FLAVOUR] = None
    platform: Annotated[str | None, PLATFORM] = None

    def load(self) -> Matrix:
        """The matrix, or every problem of the matrix file at once."""
        from imagekit.core.matrix import load_matrix

        return load_matrix(self.matrix)

    def plans(self, loaded: Matrix | None = None, *, allow_empty: bool = False) -> list[ImagePlan]:
        """The selected plans of the matrix."""
        matrix = loaded or self.load()
        return matrix.select(
            list(self.only) or None,
            self.flavour,
            platform=self.platform,
            allow_empty=allow_empty,
        )


def pairs(option: str, items: tuple[str, ...], example: str) -> tuple[tuple[str, str], ...]:
    """`A=B` items as pairs, refusing any that is not one."""
    found = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{option} {item!r} is not KEY=VALUE", f"e.g. {option} {example}")
        found.append((key, value))
    return tuple(found)


def uv_platforms(plans: Iterable[ImagePlan]) -> set[str]:
    """The platforms whose builder stage runs uv: those of the slim images (full installs its
    packages with its slim's own pip)."""
    return {p.platform for p in plans if p.flavour == "slim"}


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
        from imagekit.core.context import ContextInputs, check_wheelhouse, resolve_ca_bundle
        from imagekit.core.render import RenderOptions

        ca = None if self.no_ca_cert else resolve_ca_bundle(self.ca_cert, environ)
        if self.wheelhouse is not None:
            # An empty one would only fail at build time, as an obscure `COPY failed`.
            check_wheelhouse(self.wheelhouse)
        overrides = base_override_pairs(self.base_overrides)
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


def base_override_pairs(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--base-override IMAGE=LOCAL_IMAGE` items as (image, local image) pairs."""
    overrides = []
    for item in items:
        source, sep, target = item.partition("=")
        if not sep or not source or not target:
            raise InputError(
                f"--base-override {item!r} is not IMAGE=LOCAL_IMAGE",
                "e.g. --base-override ubuntu:24.04=imagekit-base/ubuntu:noble",
            )
        overrides.append((source, target))
    return tuple(overrides)
