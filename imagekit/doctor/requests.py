"""The request of `imagekit doctor`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import FLAVOUR, JSON, ONLY, PLATFORM, Opt
from imagekit.kernel.vocabulary import Flavour, Platform
from imagekit.matrix.selection import Selection


@dataclass(frozen=True)
class DoctorRequest:
    """Read this host's NVIDIA driver and GPUs and say whether each image's labels allow it to
    run here (driver new enough, architecture compiled in), before anything is pulled.

    Exit 7 when an image cannot use the GPUs here, or needs a GPU this host lacks."""

    images: Annotated[
        tuple[str, ...],
        Opt("--image", help="An image to check (repeatable): local engine first, then registry."),
    ] = ()
    matrix: Annotated[
        Path | None, Opt("--matrix", "-m", help="Check every image this matrix would build.")
    ] = None
    only: Annotated[tuple[str, ...], ONLY] = ()
    flavour: Annotated[Flavour | None, FLAVOUR] = None
    platform: Annotated[Platform | None, PLATFORM] = None
    nvidia_smi: Annotated[
        Path | None, Opt("--nvidia-smi", help="The nvidia-smi to ask (default: the one on PATH).")
    ] = None
    json: Annotated[bool, JSON] = False
    # A cosign public key: show each --image's attested level.
    key: Annotated[
        str | None,
        Opt(
            "--key",
            help="A cosign public key: also show the level each --image's signed verify "
            "attestation reached.",
        ),
    ] = None

    def __post_init__(self) -> None:
        if (self.only or self.platform) and self.matrix is None:
            option = "--only" if self.only else "--platform"
            raise InputError(f"{option} picks images of a matrix", "add --matrix FILE")
        if self.key and not self.images:
            raise InputError("--key checks the attestations of --image IMAGE", "add --image")

    @property
    def selection(self) -> Selection | None:
        """The images of --matrix to check; None without one."""
        if self.matrix is None:
            return None
        return Selection(self.matrix, self.only, self.flavour, self.platform)
