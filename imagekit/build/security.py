"""The security step: a base that did not take its distribution's security fixes takes them
in the build. Pure.

A base bootstrapped by imagekit carries its security suite's fixes already (or was made without
them on purpose, `--security-mirror none`), and says so in its labels. Any other base, such as
`ubuntu:24.04` or `nvidia/cuda:...` from a registry, is as old as its last publication. For such
a base the slim image's runtime stage upgrades the installed packages from the security suite
alone (Debian's `SUITE-security`, Ubuntu's `-security` pocket), not from `-updates`.

What the suite held is read when the build begins: the signed digest of its `Packages` index
(the same one `imagekit audit` reads) is an input of the image's input hash and is written into
the step, which checks that the suite apt fetches inside the build still lists that digest. An
unchanged suite keeps the image up to date (and a rebuild the same); a new fix makes a new image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from imagekit.audit.ports import IndexState, SecurityIndexSource
from imagekit.audit.release import dpkg_arch, os_release_values, security_suite
from imagekit.kernel import labels as L
from imagekit.kernel.engine import Engine, LocalImage
from imagekit.matrix.plan import ImagePlan

# The components a step upgrades from: those a distribution's images take packages from.
COMPONENTS = {"debian": "main", "ubuntu": "main restricted universe multiverse"}


@dataclass(frozen=True)
class SecuritySource:
    """Where a build reads the security suites: the reader, and the matrix's
    `security.mirror` (None: each distribution's own), the audit's too."""

    indexes: SecurityIndexSource
    mirror: str | None = None


@dataclass(frozen=True)
class SecurityStep:
    """Where the step upgrades from, and the digest the suite's index must still have."""

    mirror: str  # the archive root: http://deb.debian.org/debian-security
    suite: str  # bookworm-security, noble-security
    components: str
    packages_path: str  # main/binary-amd64/Packages.xz, as the suite's InRelease lists it
    packages_sha256: str

    @property
    def engine_input(self) -> str:
        """The suite's state, as an input of the input hash."""
        return f"{self.mirror}/dists/{self.suite} {self.packages_path} {self.packages_sha256}"


def needs_security_step(plan: ImagePlan, base_labels: Mapping[str, str]) -> bool:
    """Whether `plan`'s build takes the security suite's fixes itself: a slim image (full is
    built FROM its slim) on a base imagekit did not bootstrap."""
    return not plan.flavour.workstation and L.BASE_SUITE not in base_labels


def security_step(os_release: str, state: IndexState) -> SecurityStep:
    """The step of a base with this `/etc/os-release`, against the suite as read."""
    suite = state.suite
    components = COMPONENTS.get(os_release_values(os_release).get("ID", ""), suite.component)
    return SecurityStep(
        suite.mirror, suite.suite, components, suite.packages_path, state.packages_sha256
    )


class SecuritySteps:
    """The security step of each image of one build, each base's suite read once."""

    def __init__(self, engine: Engine, source: SecuritySource | None) -> None:
        """`source`: where the suites are read; None: no image gets the step."""
        self.engine = engine
        self.source = source
        self.read: dict[str, SecurityStep] = {}  # by base image id

    def step(self, plan: ImagePlan, base: LocalImage) -> SecurityStep | None:
        """The step of `plan` built on `base`; None where it needs none. An unreachable suite
        is engine trouble (EngineError); a base that is not Debian or Ubuntu, bad input."""
        if self.source is None or not needs_security_step(plan, base.labels):
            return None
        if base.id not in self.read:
            os_release = self.engine.output_of(base.id, ["cat", "/etc/os-release"])
            suite = security_suite(os_release, dpkg_arch(base.platform), self.source.mirror)
            self.read[base.id] = security_step(os_release, self.source.indexes.state(suite))
        return self.read[base.id]
