"""Render image plans into Dockerfiles and build-context files. Pure: no I/O but the template.

Same plan and options in, byte-identical text out: labels are sorted, nothing
reads the clock, and `created` appears only when the caller passes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import jinja2

from imagekit.build.distro_packages import full_packages, slim_packages
from imagekit.build.security import SecurityStep
from imagekit.build.stream import FAILURE_MARKER
from imagekit.build.venv_layers import (
    FULL_LAYERS_REPORT,
    FULL_STAGING,
    STAGING,
    overlay_slots,
    venv_slots,
)
from imagekit.kernel import labels as L
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.runtime_env import HOST_PATH_PYTHON, build_commands
from imagekit.matrix.compat import PYPI_SIMPLE
from imagekit.matrix.plan import ImagePlan
from imagekit.resources import templates_dir

PYPI_INDEX_URL = PYPI_SIMPLE


@dataclass(frozen=True)
class RenderOptions:
    """How to render: package sources, proxy CA, BuildKit, provenance labels."""

    wheelhouse: bool = False
    ca_bundle: bool = False
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    buildkit: bool = False
    created: str | None = None
    revision: str | None = None
    base_overrides: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RenderedImage:
    """A plan's Dockerfile and the small text files of its build context."""

    plan: ImagePlan
    dockerfile: str
    files: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    build_args: dict[str, str] = field(default_factory=dict)


def _dq(value: str) -> str:
    """Escape a value for a double-quoted Dockerfile string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["dq"] = _dq
    env.globals["runtime_env_commands"] = build_commands
    return env


def image_labels(plan: ImagePlan, options: RenderOptions) -> dict[str, str]:
    """The OCI and imagekit labels of an image, sorted by key."""
    base = plan.slim_reference if plan.flavour.workstation else base_image(plan, options)
    oci = "org.opencontainers.image."
    labels = {
        f"{oci}version": plan.tag,
        f"{oci}base.name": base,
        f"{oci}ref.name": plan.tag,
        # In the Dockerfile's one LABEL step, not the builder's: each label a legacy builder
        # is given appends a step of its own.
        L.MANAGED: "true",
    }
    labels |= content(plan).to_labels()
    if plan.source:
        labels[f"{oci}source"] = plan.source
    if options.revision:
        labels[f"{oci}revision"] = options.revision
    if options.created:
        labels[f"{oci}created"] = options.created
    return {k: labels[k] for k in sorted(labels)}


def content(plan: ImagePlan) -> ImageLabels:
    """What the image of `plan` will say of its contents in its labels."""
    cell = plan.cell
    return ImageLabels(
        cell=cell.id,
        torch=cell.torch,
        variant=cell.variant,
        python=cell.python,
        os=cell.os,
        flavour=plan.flavour,
        user=f"{plan.uid}:{plan.gid}",
        glibc_floor=cell.glibc_floor,
        cuda=cell.cuda,
        cudnn=cell.cudnn or "",
        nccl=cell.nccl or "",
        min_driver=cell.min_driver or "",
        archs=cell.archs,
        rdma=plan.rdma,
        torch_compile=plan.compile,
        platform=plan.platform,
        required_probes=plan.required_probes,
    )


def base_image(plan: ImagePlan, options: RenderOptions) -> str:
    """The base image a plan's cell starts from (its slim's base, for a workstation), as the
    options override it."""
    overrides = dict(options.base_overrides)
    return overrides.get(plan.cell.base_image, plan.cell.base_image)


def _pip_args(
    index_url: str, extra: tuple[str, ...], options: RenderOptions, *, uv: bool = False
) -> str:
    """Where pip (or uv, which takes the same options) finds packages."""
    if options.wheelhouse:
        return "--no-index --find-links /tmp/imagekit/wheelhouse"
    urls = [f"--index-url {options.pip_index_url or index_url}"]
    urls += [f"--extra-index-url {u}" for u in (*extra, *options.extra_index_urls)]
    if uv and len(urls) > 1:
        # uv takes a package from the first index that has it, and asks extra indexes first:
        # torch would come from PyPI instead of the CUDA index. pip's rule is the best version
        # from any index, which this restores.
        urls.append("--index-strategy unsafe-best-match")
    return " ".join(urls)


def requirements(plan: ImagePlan) -> dict[str, str]:
    """The pip requirement files of an image's build context."""
    cell = plan.cell
    if not plan.flavour.workstation:
        lines = [f"torch=={cell.torch}", *plan.packages]
        # Without numpy every `import torch` warns "Failed to initialize NumPy", and
        # `.numpy()` fails: slim carries it, at the version pip resolves with torch's own
        # dependencies, unless the matrix pins it in `packages`.
        if not any(_distribution(line) == "numpy" for line in plan.packages):
            lines.append("numpy")
        return {"requirements.txt": _requirements_text(lines, f"slim {cell.id}")}
    lines = [*plan.packages, *cell.compiler_packages]
    return {"requirements-full.txt": _requirements_text(lines, f"full {cell.id}")}


def _distribution(requirement: str) -> str:
    """The normalised distribution name a requirement line names."""
    name = re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


FULL_FILES = ("entrypoint.sh", "healthcheck.sh", "sshd_config.in", "exec-env.sh")
# Python's start-up hook in every image (/dev/shm warning, the torch.compile notice).
SITE_FILES = ("imagekit_site.py", "imagekit-site.pth")
# Run in slim's builder stage: what a runtime image does not need leaves the virtualenv.
PRUNE_SCRIPT = "prune_venv.py"
# Run after it: the virtualenv sorted into one folder per layer (build/venv_layers.py).
LAYER_SCRIPT = "layer_venv.py"


def full_files() -> dict[str, str]:
    """The workstation files a full image carries (templates/full/), by context name."""
    folder = templates_dir() / "full"
    return {name: (folder / name).read_text(encoding="utf-8") for name in FULL_FILES}


def _requirements_text(lines: list[str], what: str) -> str:
    head = f"# Rendered by imagekit for {what}; do not edit by hand.\n"
    return head + "".join(f"{line}\n" for line in lines)


def runtime_packages(plan: ImagePlan) -> list[str]:
    """The distribution packages slim's runtime stage makes sure of (build/distro_packages.py)."""
    if plan.flavour.workstation:
        return []
    return list(slim_packages(plan.cell.python, compile=plan.compile, rdma=plan.rdma))


def render_image(
    plan: ImagePlan, options: RenderOptions | None = None, security: SecurityStep | None = None
) -> RenderedImage:
    """Render one plan's Dockerfile and context files; `security`: the step that takes the
    security suite's fixes on a base imagekit did not bootstrap (known once the base is)."""
    options = options or RenderOptions()
    cell = plan.cell
    files = requirements(plan)
    if plan.flavour.workstation:
        files |= full_files()
    files[PRUNE_SCRIPT] = (templates_dir() / PRUNE_SCRIPT).read_text(encoding="utf-8")
    files[LAYER_SCRIPT] = (templates_dir() / LAYER_SCRIPT).read_text(encoding="utf-8")
    if not plan.flavour.workstation:
        files |= {n: (templates_dir() / n).read_text(encoding="utf-8") for n in SITE_FILES}
    slim_extra = (PYPI_INDEX_URL,) if plan.packages and not plan.flavour.workstation else ()
    labels = image_labels(plan, options)
    what = f"CUDA {cell.cuda}" if cell.cuda else "CPU"
    context = {
        "plan": plan,
        "cell": cell,
        "buildkit": options.buildkit,
        "wheelhouse": options.wheelhouse,
        "ca_bundle": options.ca_bundle,
        "slim_pip_args": _pip_args(cell.index_url, slim_extra, options, uv=True),
        "full_pip_args": _pip_args(PYPI_INDEX_URL, (), options),
        "labels": labels,
        "runtime_packages": " ".join(runtime_packages(plan)),
        "full_packages": " ".join(full_packages(cell.python, rdma=plan.rdma)),
        "failure_marker": FAILURE_MARKER,
        "venv_slots": venv_slots(cuda=bool(cell.cuda)),
        "staging": STAGING,
        "overlay_slots": overlay_slots(cuda=bool(cell.cuda)),
        "full_staging": FULL_STAGING,
        "full_layers_report": FULL_LAYERS_REPORT,
        # Builder stages carry these two, so `imagekit gc` can find their dangling layers.
        "stage_label": L.STAGE,
        "cell_label": L.CELL,
        "title": f"PyTorch {cell.torch} {what} Python {cell.python} ({plan.flavour})",
        "security": security,
        "host_path_python": HOST_PATH_PYTHON,
    }
    dockerfile = _environment().get_template("Dockerfile.j2").render(context)
    # Macros leave runs of blank lines behind; one blank line is enough.
    dockerfile = re.sub(r"\n{3,}", "\n\n", dockerfile).rstrip("\n") + "\n"
    if not plan.flavour.workstation:
        build_args = {"BASE_IMAGE": base_image(plan, options)}
    else:
        build_args = {"SLIM_IMAGE": plan.slim_reference}
    return RenderedImage(plan, dockerfile, files, labels, build_args)
