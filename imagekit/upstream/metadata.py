"""What a torch wheel says about itself, and whether compat.yaml agrees. Pure.

A wheel's file name carries its release, its local version label (`+cpu`, `+cu130`; none for
PyPI's own build), its Python tag and its platform tag (`manylinux_2_28_x86_64`: glibc 2.28 on
x86_64). Its METADATA pins the NVIDIA wheels it runs with: from torch 2.11 a `cuda-toolkit[...]`
meta-package and `nvidia-*-cu13` wheels, before that `nvidia-cuda-runtime-cu12` and the other
`nvidia-*-cu12` pins. `wheel_facts` reads both into one `WheelFacts`; `group_releases` folds the
wheels of a release into its variants and refuses wheels of one build that disagree;
`disagreements` locates, in compat.yaml, every fact a wheel contradicts (the wheel wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from packaging.markers import default_environment
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from imagekit.errors import InputError, Problem, ValidationError
from imagekit.matrix.compat import CPU, CompatData, version_key
from imagekit.matrix.yamlsrc import SourceMap, load_yaml
from imagekit.upstream.simple_index import IndexFile

# glibc of the manylinux tags named before PEP 600 (manylinux_X_Y) spelled the glibc out.
LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
CUDNN, NCCL, TOOLKIT = "nvidia-cudnn-cu", "nvidia-nccl-cu", "cuda-toolkit"
# Where the CUDA version is read from, newest scheme first: the toolkit meta-package (2.11+),
# else the runtime wheel (`nvidia-cuda-runtime-cu12==12.8.90` is CUDA 12.8).
CUDA_CARRIERS = (
    TOOLKIT,
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu11",
    "nvidia-cuda-runtime-cu12",
)


class Machine(StrEnum):
    """The Linux machines PyTorch ships wheels for (Docker's linux/amd64 and linux/arm64)."""

    x86_64 = "x86_64"
    aarch64 = "aarch64"


@dataclass(frozen=True)
class WheelFacts:
    """What one Linux torch wheel says about itself: file name and METADATA together."""

    filename: str
    sha256: str
    torch: str  # the public version, "2.14.1"
    label: str | None  # the local version label: "cpu", "cu130"; None on PyPI's own build
    cuda: str | None  # None: a CPU build
    cudnn: str | None
    nccl: str | None
    pins: tuple[tuple[str, str], ...]  # every NVIDIA/CUDA wheel pinned with ==, by name
    python: str  # "3.11"
    machine: Machine
    platform: str  # compat.yaml's name of the platform tag: "manylinux_2_28"
    glibc: str

    @property
    def source(self) -> str:
        """`filename sha256:...`: how a report names where a fact came from."""
        return f"{self.filename} sha256:{self.sha256 or 'unknown'}"

    @property
    def variant(self) -> str:
        """compat's name of the build: its CUDA version, or `cpu`."""
        return self.cuda or CPU


def _platform(tag: str) -> tuple[str, str, Machine] | None:
    """(compat's platform name, glibc, machine) of a manylinux tag; None for any other."""
    for machine in Machine:
        if tag.endswith("_" + machine):
            stem = tag.removesuffix("_" + machine)
            break
    else:
        return None
    if stem in LEGACY_MANYLINUX:
        return stem, LEGACY_MANYLINUX[stem], machine
    parts = stem.split("_")
    if len(parts) == 3 and parts[0] == "manylinux" and all(p.isdigit() for p in parts[1:]):
        return stem, f"{parts[1]}.{parts[2]}", machine
    return None


def _lowest_platform(tags: set[str]) -> tuple[str, str, Machine] | None:
    """The platform tag a wheel needs least of: compressed tags name several aliases."""
    found = [p for p in map(_platform, tags) if p is not None]
    return min(found, key=lambda p: version_key(p[1])) if found else None


def _cuda_of_label(label: str) -> str:
    """`cu130` -> "13.0", `cu118` -> "11.8"."""
    digits = label.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def _pins(filename: str, requires: list[str], python: str, machine: Machine) -> dict[str, str]:
    """The NVIDIA/CUDA wheels pinned with == that apply on Linux `machine` with `python`."""
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    environment["extra"] = ""
    environment |= {"platform_system": "Linux", "sys_platform": "linux", "os_name": "posix"}
    environment |= {"platform_machine": str(machine), "python_version": python}
    pins: dict[str, str] = {}
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise InputError(
                f"{filename}: METADATA has a bad Requires-Dist {line!r} ({exc})"
            ) from None
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        exact = [s.version for s in requirement.specifier if s.operator == "=="]
        if exact and (name.startswith("nvidia-") or name.startswith("cuda-")):
            pins[name] = exact[0]
    return pins


def _pinned(pins: dict[str, str], prefix: str) -> str | None:
    return next((v for n, v in sorted(pins.items()) if n.startswith(prefix)), None)


def wheel_facts(filename: str, sha256: str, metadata: str) -> WheelFacts | None:
    """The facts of one wheel of torch from its file name and METADATA text; None for a wheel
    imagekit builds nothing from (not Linux, not a CPU or CUDA build). Raises `InputError`
    (`FILE: what; what to do`) where the name or METADATA is malformed or contradicts itself."""
    try:
        name, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise InputError(f"{filename}: not a wheel file name ({exc})") from None
    platform = _lowest_platform({t.platform for t in tags})
    interpreters = sorted({t.interpreter for t in tags if t.interpreter.startswith("cp")})
    label = version.local
    if name != "torch" or platform is None or not interpreters:
        return None
    if label is not None and label != CPU and not label.startswith("cu"):
        return None  # ROCm, XPU: builds imagekit does not make images of
    python = f"{interpreters[0][2]}.{interpreters[0][3:]}"
    raw, _ = parse_email(metadata)
    if str(raw.get("version", "")) != str(version):
        said = raw.get("version", "no version")
        raise InputError(
            f"{filename}: its METADATA is of version {said}, not {version}; "
            "the index serves the wrong file"
        )
    pins = _pins(filename, list(raw.get("requires_dist", [])), python, platform[2])
    cuda_pin = next((pins[n] for n in CUDA_CARRIERS if n in pins), None)
    cuda = ".".join(cuda_pin.split(".")[:2]) if cuda_pin else None
    facts = WheelFacts(
        filename,
        sha256,
        version.public,
        label,
        cuda,
        _pinned(pins, CUDNN),
        _pinned(pins, NCCL),
        tuple(sorted(pins.items())),
        python,
        platform[2],
        platform[0],
        platform[1],
    )
    _check_self(facts)
    return facts


def _check_self(wheel: WheelFacts) -> None:
    """A wheel's label, CUDA pins, cuDNN and NCCL must tell one story."""
    expected = None if wheel.label in (None, CPU) else _cuda_of_label(wheel.label)
    if wheel.label == CPU and wheel.pins:
        raise InputError(
            f"{wheel.filename}: a +cpu build that pins NVIDIA wheels "
            f"({wheel.pins[0][0]}); the index mixes up its builds"
        )
    if expected is not None and wheel.cuda != expected:
        found = f"pins CUDA {wheel.cuda}" if wheel.cuda else "pins no CUDA toolkit"
        raise InputError(
            f"{wheel.filename}: its label +{wheel.label} says CUDA {expected} but "
            f"it {found}; the index mixes up its builds"
        )
    if wheel.cuda and not (wheel.cudnn and wheel.nccl):
        missing = "cuDNN" if not wheel.cudnn else "NCCL"
        raise InputError(
            f"{wheel.filename}: a CUDA {wheel.cuda} build that pins no {missing} "
            "wheel; compat.yaml needs both pins of every CUDA variant"
        )


def candidate(filename: str) -> tuple[str, tuple[int, ...]] | None:
    """(release, its version key) of a wheel imagekit may build from, by its name alone: a
    Linux CPython torch wheel of a CPU or CUDA build. What this refuses is never read further."""
    try:
        name, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    label = version.local
    if name != "torch" or (label not in (None, CPU) and not str(label).startswith("cu")):
        return None
    if _lowest_platform({t.platform for t in tags}) is None:
        return None
    if not any(t.interpreter.startswith("cp") for t in tags):
        return None
    return version.public, version.release


def wanted(files: tuple[IndexFile, ...], floor: str) -> list[IndexFile]:
    """The files of the newest patch release of each minor series from `floor` on."""
    found = [(f, c) for f in files if (c := candidate(f.filename)) is not None]
    newest: dict[tuple[int, ...], tuple[int, ...]] = {}
    for _, (_, key) in found:
        newest[key[:2]] = max(newest.get(key[:2], key), key)
    lowest = version_key(floor)
    return [f for f, (_, key) in found if newest[key[:2]] == key and key >= lowest]


@dataclass(frozen=True)
class Variant:
    """One build (a CUDA version, or CPU) of one release, as the wheels on the indexes say."""

    cuda: str | None
    cudnn: str | None
    nccl: str | None
    default: bool  # an unlabelled x86_64 wheel: PyPI's own (default) build
    arm64: bool  # an unlabelled aarch64 wheel: PyPI's linux/arm64 build
    wheels: tuple[WheelFacts, ...]

    @property
    def name(self) -> str:
        return self.cuda or CPU


@dataclass(frozen=True)
class Release:
    """One torch release as the indexes hold it."""

    torch: str
    python_min: str
    python_max: str
    platform: str
    glibc: str
    variants: tuple[Variant, ...]  # CUDA versions oldest first, CPU last

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)


def _variant(wheels: list[WheelFacts]) -> Variant:
    """The wheels of one build folded into its variant; refused where their pins differ."""
    first = wheels[0]
    for other in wheels[1:]:
        if (other.cudnn, other.nccl) != (first.cudnn, first.nccl):
            raise InputError(
                f"{other.filename}: pins cuDNN {other.cudnn} and NCCL {other.nccl} but "
                f"{first.filename} of the same build pins {first.cudnn} and {first.nccl}; "
                "compat.yaml holds one pin per variant: leave out the index that differs"
            )
    unlabelled = {w.machine for w in wheels if w.label is None}
    ordered = tuple(sorted(wheels, key=lambda w: w.filename))
    return Variant(
        first.cuda,
        first.cudnn,
        first.nccl,
        Machine.x86_64 in unlabelled,
        Machine.aarch64 in unlabelled,
        ordered,
    )


def _release(torch: str, wheels: list[WheelFacts]) -> Release:
    x86 = [w for w in wheels if w.machine is Machine.x86_64] or wheels
    platforms = sorted({(w.glibc, w.platform) for w in x86}, key=lambda p: version_key(p[0]))
    if len(platforms) > 1:
        named = ", ".join(f"{p} (glibc {g})" for g, p in platforms)
        raise InputError(
            f"torch {torch}: its wheels need different platforms ({named}); "
            "compat.yaml holds one per release: leave out the index that "
            "differs"
        )
    builds: dict[str, list[WheelFacts]] = {}
    for wheel in wheels:
        builds.setdefault(wheel.variant, []).append(wheel)
    order = sorted(builds, key=lambda v: (v == CPU, version_key(v) if v != CPU else ()))
    pythons = sorted({w.python for w in wheels}, key=version_key)
    return Release(
        torch,
        pythons[0],
        pythons[-1],
        platforms[0][1],
        platforms[0][0],
        tuple(_variant(builds[v]) for v in order),
    )


def group_releases(wheels: list[WheelFacts]) -> tuple[Release, ...]:
    """The releases the wheels make, oldest first (`InputError` where a build disagrees)."""
    by_release: dict[str, list[WheelFacts]] = {}
    for wheel in wheels:
        by_release.setdefault(wheel.torch, []).append(wheel)
    return tuple(_release(t, by_release[t]) for t in sorted(by_release, key=version_key))


@dataclass(frozen=True)
class CompatSource:
    """compat.yaml as text, as data, and where each of its values is."""

    file: str
    text: str
    data: CompatData
    where: SourceMap


def read_compat(text: str, file: str) -> CompatSource:
    """compat.yaml's text loaded and validated (`ValidationError` with file:line:col)."""
    import pydantic

    data, where = load_yaml(text, file)
    if where.problems:
        raise ValidationError(where.problems)
    try:
        return CompatSource(file, text, CompatData.model_validate(data), where)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        path = tuple(p for p in error["loc"] if isinstance(p, str | int))
        raise ValidationError([where.problem(path, f"compat data: {error['msg']}")]) from None


def disagreements(wheel: WheelFacts, compat: CompatSource) -> list[Problem]:
    """Every fact of compat.yaml this wheel contradicts, located in the file (the wheel's
    METADATA wins). A release compat does not know has nothing to contradict."""
    release = compat.data.torch.get(wheel.torch)
    if release is None:
        return []
    by = f"{wheel.filename} (sha256:{wheel.sha256 or 'unknown'})"
    found: list[Problem] = []

    def say(*path: str, what: str) -> None:
        problem = compat.where.problem(
            ("torch", wheel.torch, *path), f"torch {wheel.torch}: {what}"
        )
        found.append(problem)

    if not release.python.contains(wheel.python):
        say("python", what=f"Python {release.python}, yet {by} is for {wheel.python}; widen it")
    floor = compat.data.glibc_floor(wheel.torch)
    if floor != wheel.glibc:
        say(
            "platform",
            what=f"{release.platform} (glibc {floor}), yet {by} is "
            f"{wheel.platform} (glibc {wheel.glibc}); name the wheel's platform",
        )
    cuda = wheel.cuda
    if cuda is None:
        return found
    if cuda not in release.variants:
        say("variants", what=f"no CUDA {cuda} variant, yet {by} is one; add it")
        return found
    facts = release.variants[cuda]
    for field, pinned in (("cudnn", wheel.cudnn), ("nccl", wheel.nccl)):
        if getattr(facts, field) != pinned:
            say(
                "variants",
                cuda,
                field,
                what=f"CUDA {cuda} {field} is "
                f"{getattr(facts, field)}, yet {by} pins {pinned}; correct it",
            )
    unlabelled = wheel.label is None
    if unlabelled and wheel.machine is Machine.x86_64 and release.pypi_default_cuda != cuda:
        say(
            "pypi_default_cuda",
            what=f"PyPI's default CUDA is {release.pypi_default_cuda}, "
            f"yet {by} (no label) is CUDA {cuda}; correct it",
        )
    if unlabelled and wheel.machine is Machine.aarch64 and facts.arm64 is None:
        say("variants", cuda, what=f"CUDA {cuda} has no arm64 build, yet {by} is one; add it")
    return found
