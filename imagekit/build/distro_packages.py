"""The distribution packages each build step installs, with one owner (pure).

The template installs only what its base lacks (it asks dpkg first), so a base that already
carries these packages builds with no package mirror at all: `imagekit base bootstrap
--packages-for slim|full` makes one. The names are Debian's and Ubuntu's.
"""

from __future__ import annotations

from imagekit.kernel.vocabulary import Flavour

# The user-space RDMA stack NCCL needs for InfiniBand/RoCE.
RDMA_PACKAGES = ("ibverbs-providers", "libibverbs1", "rdma-core")
# The default base's own packages: Python with venv, and the CA certificates pip needs.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# What full adds to slim: compilers, the workstation's services and the tools users expect.
WORKSTATION_PACKAGES = (
    "build-essential",
    "ca-certificates",
    "curl",
    "git",
    "less",
    "libnss-wrapper",
    "ninja-build",
    "openssh-client",
    "openssh-server",
    "tini",
)


def slim_packages(python: str, *, compile: bool, rdma: bool = False) -> tuple[str, ...]:
    """What slim's runtime stage installs: a C++ compiler and Python's headers where
    torch.compile must work (openssl: inductor hashes its precompiled header with `openssl
    sha512`), the RDMA stack where the matrix asks for it."""
    packages = ("g++", "openssl", f"python{python}-dev") if compile else ()
    return packages + (RDMA_PACKAGES if rdma else ())


def full_packages(python: str, *, rdma: bool = False) -> tuple[str, ...]:
    """What full's stage installs on top of slim."""
    return (*WORKSTATION_PACKAGES, f"python{python}-dev") + (RDMA_PACKAGES if rdma else ())


def packages_for(flavour: Flavour) -> tuple[str, ...]:
    """The packages a base for `flavour` carries besides its own, so that every step of that
    flavour (and of slim under a full) finds them installed. `python3-dev` is the suite's
    default Python's: it brings `python3.X-dev`, the name the template asks dpkg about."""
    wanted = slim_packages("3", compile=True)
    if flavour.workstation:
        wanted += full_packages("3")
    return tuple(dict.fromkeys(p for p in wanted if p not in BASE_PACKAGES))
