"""Steps 3 to 6 of loading a matrix: approved combinations into cells, cells into image
plans, the one `latest` cell, and every tag and alias.

`expand_cells` makes the cells of the release entries (`EntryCheck` approves them), `Planner`
turns cells into plans minus exclusions, `pick_latest` decides `latest`, and `Tags` gives the
versioned tags and the aliases. Each reports into the one `Findings` of the load.
"""

from __future__ import annotations

from dataclasses import replace

from imagekit.kernel.vocabulary import Flavour, Platform
from imagekit.matrix.checks import Findings
from imagekit.matrix.compat import CPU, CompatData, variant_tag, version_key
from imagekit.matrix.entries import Combo, EntryCheck
from imagekit.matrix.plan import FLAVOURS, Cell, ImagePlan, platform_suffix, tag_problem
from imagekit.matrix.schema import MatrixFile, Selector
from imagekit.matrix.yamlsrc import Path

# Step 3, expansion: approved combinations into cells -------------------------------


def expand_cells(spec: MatrixFile, compat: CompatData, report: Findings) -> list[Cell]:
    """The cells of all release entries, in document order.

    Entry by entry: `EntryCheck.approve` reports the entry's problems, then its
    combinations become cells. A cell id made twice is reported at the later `cuda`
    item (naming where the first was made) and dropped.
    """
    check = EntryCheck(spec, compat, report)
    cells: list[Cell] = []
    seen: dict[str, Path] = {}
    for i, entry in enumerate(spec.releases):
        for combo in check.approve(i, entry):
            cell = _make_cell(combo, spec, compat)
            if cell.id in seen:
                if cell.platform != Platform.AMD64 and cell.shared_id in seen:
                    continue  # this combination's duplicate is reported once, not per platform
                line, col = report.source.position(seen[cell.id])
                report.fail(
                    combo.path,
                    f"duplicate cell {cell.id} (also made at line {line}, column {col})",
                    "each torch/CUDA/Python combination may appear once",
                )
                continue
            seen[cell.id] = combo.path
            cells.append(cell)
    return cells


def _make_cell(combo: Combo, spec: MatrixFile, compat: CompatData) -> Cell:
    """The cell of an approved combination, with its facts from the compatibility data."""
    entry, cuda, platform = combo.entry, combo.cuda, combo.platform
    variant = compat.torch[entry.torch].variants[cuda] if cuda else None
    cuda_facts = compat.cuda[cuda] if cuda else None
    bases = spec.bases[combo.os]
    return Cell(
        id=f"{combo.name}-{variant_tag(cuda)}-py{combo.python}{platform_suffix(platform)}",
        torch=entry.torch,
        cuda=cuda,
        python=combo.python,
        os=combo.os,
        base_image=bases[platform] if isinstance(bases, dict) else bases,
        cudnn=variant.cudnn if variant else None,
        nccl=variant.nccl if variant else None,
        min_driver=cuda_facts.min_driver if cuda_facts else None,
        archs=compat.archs_for(entry.torch, cuda, platform) if cuda else (),
        index_url=compat.index_url_on(cuda, platform, entry.torch),
        glibc_floor=compat.glibc_floor(entry.torch),
        compiler_packages=cuda_facts.compiler_packages if cuda_facts else (),
        cuda_home=cuda_facts.cuda_home if cuda_facts else None,
        experimental=bool(variant and variant.experimental),
        flavours=tuple(f for f in FLAVOURS if f in entry.flavours),
        platform=Platform(platform),
        end_of_patch=entry.end_of_patch,
    )


# Step 4, images: cells in flavours, minus exclusions -------------------------------


class Planner:
    """Turns cells into image plans (without aliases; step 6 adds those).

    One plan per cell and flavour, in cell then `FLAVOURS` order, unless an
    exclusion takes it or its tag is invalid. Reports exclusions that match no
    image, and a matrix whose every image is excluded.
    """

    def __init__(self, spec: MatrixFile, tags: Tags, report: Findings) -> None:
        self.spec = spec
        self.tags = tags
        self.report = report

    def plans(self, cells: list[Cell]) -> list[ImagePlan]:
        plans = []
        used: set[int] = set()
        for cell in cells:
            for flavour in cell.flavours:
                hit = self.exclusion_for(cell, flavour)
                if hit is not None:
                    used.add(hit)
                    continue
                tag = self.tags.versioned(cell, flavour)
                if tag is not None:
                    plans.append(self.plan(cell, flavour, tag))
        for i, _ in enumerate(self.spec.exclude):
            if i not in used:
                self.report.fail(
                    ("exclude", i),
                    "this exclusion matches no image",
                    "remove it, or fix its torch/cuda/python/flavour",
                )
        if cells and not plans and not self.report.problems:
            self.report.fail(("releases",), "every image is excluded; nothing would be built")
        return plans

    def exclusion_for(self, cell: Cell, flavour: Flavour) -> int | None:
        """The index of the first exclusion that takes `cell` in `flavour`, if any."""
        for i, ex in enumerate(self.spec.exclude):
            if _selects(ex, cell) and ex.flavour in (None, flavour):
                return i
        return None

    def plan(self, cell: Cell, flavour: Flavour, tag: str) -> ImagePlan:
        spec = self.spec
        fspec = getattr(spec.flavours, flavour)
        return ImagePlan(
            cell=cell,
            flavour=flavour,
            repository=spec.repository,
            tag=tag,
            aliases=(),
            size_budget_bytes=fspec.size_budget_bytes,
            packages=tuple(fspec.packages),
            required_probes=tuple(fspec.required_probes),
            nodes=fspec.nodes,
            rdma=fspec.rdma,
            compile=fspec.compile,
            # full reinstalls what its slim left out, so both carry the list.
            leave_out=tuple(spec.flavours.slim.leave_out),
            user_name=spec.user.name,
            uid=spec.user.uid,
            gid=spec.user.gid,
            source=spec.source,
        )


# Step 5, the latest cell ------------------------------------------------------------


def pick_latest(spec: MatrixFile, cells: list[Cell], report: Findings) -> Cell | None:
    """The one cell `latest:` selects; None, reported, when it selects none or several.

    This is the only place `latest` is decided; step 6 gives its aliases to this cell.
    """
    # One image may be several cells, one per platform: the first stands for them all.
    found: list[Cell] = []
    for cell in cells:
        if _selects(spec.latest, cell) and all(c.shared_id != cell.shared_id for c in found):
            found.append(cell)
    if len(found) == 1:
        return found[0]
    sel = spec.latest
    if not found:
        report.fail(
            ("latest",),
            f"latest (torch {sel.torch}, cuda {sel.cuda}) matches no cell",
            f"cells: {', '.join(c.id for c in cells) or 'none'}",
        )
    else:
        report.fail(
            ("latest",),
            f"latest matches {len(found)} cells ({', '.join(c.id for c in found)})",
            "add `python:` to pick one",
        )
    return None


# Steps 4 and 6, tags and aliases ---------------------------------------------------


class Tags:
    """Every tag and alias an image gets, each decided once.

    `versioned` gives the immutable tag of a cell in a flavour (None, reported, when
    Docker would refuse it). `with_aliases` gives each floating alias to the plan with
    the newest Python of its group, `latest-{flavour}` to each image of the latest
    cell, and `latest` to its full image, or, when full is not built, to its others.
    """

    def __init__(self, prefix: str, report: Findings) -> None:
        self.prefix = prefix
        self.report = report

    def versioned(self, cell: Cell, flavour: Flavour) -> str | None:
        tag = cell.versioned_tag(flavour, self.prefix)
        # The engine holds each platform's image under the tag plus its suffix: that too
        # must be a valid tag.
        if (why := tag_problem(tag + platform_suffix(cell.platform))) is not None:
            path: Path = ("tag_prefix",) if self.prefix else ("releases",)
            hint = (
                "shorten tag_prefix (a linux/arm64 image's local tag adds -arm64)"
                if "characters long" in why
                else "tags may hold a-z, 0-9, '.', '_' and '-' only"
            )
            self.report.fail(path, why, hint)
            return None
        return tag

    def with_aliases(self, plans: list[ImagePlan], latest: Cell) -> list[ImagePlan]:
        """`plans` with their aliases: owned floating ones, then `latest-*`, then `latest`."""
        owner = self.floating_owners(plans)
        latest_plans = [p for p in plans if p.cell.shared_id == latest.shared_id]
        # An exclusion may drop the latest cell's `full`; `latest` then goes to its
        # other images, not to nobody.
        latest_owners = [p for p in latest_plans if p.flavour.workstation] or latest_plans
        out = []
        for plan in plans:
            aliases = [a for a, p in owner.items() if _owns(p, plan)]
            if any(plan is p for p in latest_plans):
                aliases.append(f"{self.prefix}latest-{plan.flavour}")
            if any(plan is p for p in latest_owners):
                aliases.append(f"{self.prefix}latest")
            out.append(replace(plan, aliases=tuple(aliases)))
        return out

    def floating_owners(self, plans: list[ImagePlan]) -> dict[str, ImagePlan]:
        """Each floating alias and the plan with the newest Python of its group (the
        first such plan on a tie). The alias goes to every platform of the owner's image
        (`owns`): one index, never platforms of different Pythons."""
        owner: dict[str, ImagePlan] = {}
        for plan in plans:
            alias = plan.cell.alias_tag(plan.flavour, self.prefix)
            best = owner.get(alias)
            if best is None or version_key(plan.cell.python) > version_key(best.cell.python):
                owner[alias] = plan
        return owner


def _owns(owner: ImagePlan, plan: ImagePlan) -> bool:
    """Whether `plan` is a platform of the image `owner` is (the same cell and flavour)."""
    return owner.cell.shared_id == plan.cell.shared_id and owner.flavour == plan.flavour


def _selects(selector: Selector, cell: Cell) -> bool:
    cuda = CPU if cell.cuda is None else cell.cuda
    return (
        selector.torch in (None, cell.torch)
        and selector.cuda in (None, cuda)
        and selector.python in (None, cell.python)
    )
