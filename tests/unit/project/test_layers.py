"""The rooms stay visible: the kernel imports no feature, each feature imports only the
features it declares and never an adapter or the CLI, a feature's use cases talk to the world
only through the ports, adapters never reach up into a use case or the CLI, and every module of
the package belongs to a room.

`make lint` runs this file, so a leak fails before any other test runs. Each rule is also run
on a planted violation, so that a rule that stopped seeing anything fails too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "imagekit"
PROBES = PACKAGE.parent / "probes"

# Modules no pure room may import (a prefix matches the module and everything below it).
EFFECTS = ("docker", "requests", "subprocess", "testinfra", "socket", "urllib.request", "typer")
# Each feature and the other features it may import; the kernel and the root modules are open to
# all. A feature not named here is no feature: test_every_module_belongs_to_a_room fails.
FEATURES: dict[str, tuple[str, ...]] = {
    "matrix": (),
    "build": ("matrix", "audit"),  # the security step reads the suite the audit reads
    "verify": ("matrix",),
    # The gate reads verify's records and levels, and runs an audit.
    "publish": ("matrix", "verify", "audit"),
    "site": ("verify",),  # the page shows verify's summary and changes
    "upstream": ("matrix",),
    "doctor": ("matrix",),
    "serve": (),
    "audit": ("matrix",),
    "hpc": (),
}
# A feature's use cases: the modules that sequence its decisions over the ports and emit events.
# They reach the environment and the file system only through the ports, and no adapter imports
# them.
USE_CASES: dict[str, tuple[str, ...]] = {
    "build": ("use_case", "run", "bake_run"),
    "verify": ("run", "settings", "hostprobe", "nodes"),
    "publish": ("run", "promote", "index", "log", "attest_run", "attest_verify"),
    "upstream": ("run",),
    "audit": ("run",),
}
_OUTER = ("imagekit.adapters", "imagekit.cli")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "kernel": (*_OUTER, *(f"imagekit.{f}" for f in FEATURES), *EFFECTS),
    **{
        feature: (
            *_OUTER,
            *(f"imagekit.{f}" for f in FEATURES if f != feature and f not in allowed),
            *EFFECTS,
        )
        for feature, allowed in FEATURES.items()
    },
    "adapters": (
        "imagekit.cli",
        *(f"imagekit.{f}.{m}" for f, modules in USE_CASES.items() for m in modules),
    ),
    "cli": (),
}
# The modules at the package's root, each in the room whose rules it keeps. A new one fails
# test_every_module_belongs_to_a_room until it is placed here.
ROOT_MODULES = {
    "__init__.py": "kernel",  # the version
    "__main__.py": "cli",  # `python -m imagekit`
    "errors.py": "kernel",  # the error kinds and exit codes every room raises
    "resources.py": "kernel",  # where the bundled templates/ and probes/ lie
    "events.py": "kernel",  # the events use cases emit, and the sink they call
}
# Use cases reach the environment and the file system only through the ports: no
# `os.environ`/`os.getenv`, no `open()`, no Path reads or writes of their own.
ORCHESTRATION_EFFECTS = {
    "os.environ", "os.getenv", "os.putenv", "os.remove", "os.unlink", "os.makedirs",
    "shutil", "open", "write_text", "write_bytes", "read_text", "read_bytes", "mkdir", "unlink",
    "rmtree", "touch",
}  # fmt: skip


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """Every module `path` imports, with its line; relative imports are resolved against
    `module` (the dotted name of `path`, by default from where it lies in the package)."""
    module = module or _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _files(layer: str, root: Path = PACKAGE) -> list[Path]:
    placed = [root / name for name, owner in ROOT_MODULES.items() if owner == layer]
    return sorted([*(root / layer).rglob("*.py"), *(p for p in placed if p.exists())])


def use_cases(root: Path = PACKAGE) -> list[Path]:
    """The files of every feature's use cases."""
    found = [root / feature / f"{m}.py" for feature, ms in USE_CASES.items() for m in ms]
    return sorted(p for p in found if p.exists())


def leaks(layer: str, root: Path = PACKAGE) -> list[str]:
    """`file:line: imports X` for every forbidden import in one layer."""
    banned = FORBIDDEN[layer]
    found = []
    for path in _files(layer, root):
        module = "imagekit." + _dotted(path, root)
        for line, name in imports(path, module):
            if any(name == b or name.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(root.parent)}:{line}: imports {name}")
    return sorted(set(found))


def _dotted(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def effects(path: Path) -> list[str]:
    """`file:line: uses X` for each reach of orchestration code into the environment or the
    file system: `os.environ`, `open(...)`, `.write_text(...)` and the like."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if owner == "os":
                name = f"os.{node.attr}" if f"os.{node.attr}" in ORCHESTRATION_EFFECTS else ""
            elif node.attr in ORCHESTRATION_EFFECTS:  # a Path's (or any object's) own method
                name = node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id if node.func.id == "open" else ""
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            modules += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            name = next((m for m in modules if m == "shutil"), "")
        if name:
            found.append(f"{path.name}:{getattr(node, 'lineno', 0)}: uses {name}")
    return sorted(set(found))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_it_may(layer: str) -> None:
    assert leaks(layer) == []


def test_every_module_belongs_to_a_room() -> None:
    unplaced = [p.name for p in PACKAGE.glob("*.py") if p.name not in ROOT_MODULES]
    folders = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    assert unplaced == []
    assert sorted(folders) == sorted(FORBIDDEN)


def test_every_declared_use_case_exists() -> None:
    declared = [f"{f}/{m}.py" for f, ms in USE_CASES.items() for m in ms]
    assert [d for d in declared if not (PACKAGE / d).exists()] == []


def test_use_cases_reach_the_world_only_through_the_ports() -> None:
    found = [e for path in use_cases() for e in effects(path)]
    assert found == []


# Each rule on a planted violation ----------------------------------------------------------


def _plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "imagekit"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_contract_catches_a_core_module_that_imports_docker(tmp_path: Path) -> None:
    package = _plant(
        tmp_path, {"kernel/bad.py": "from __future__ import annotations\nimport docker.errors\n"}
    )
    assert leaks("kernel", package) == ["imagekit/kernel/bad.py:2: imports docker.errors"]


def test_the_contract_catches_a_feature_that_imports_an_undeclared_feature(
    tmp_path: Path,
) -> None:
    package = _plant(
        tmp_path,
        {
            "matrix/bad.py": "from imagekit.build.render import render\n",
            "build/fine.py": "from imagekit.matrix.plan import ImagePlan\n",
            "kernel/bad.py": "from imagekit.matrix import plan\n",
            "adapters/bad.py": "from imagekit.verify.run import VerifyRun\n",
        },
    )
    assert leaks("matrix", package) == [
        "imagekit/matrix/bad.py:1: imports imagekit.build.render",
        "imagekit/matrix/bad.py:1: imports imagekit.build.render.render",
    ]
    assert leaks("build", package) == []
    assert leaks("kernel", package) == [
        "imagekit/kernel/bad.py:1: imports imagekit.matrix",
        "imagekit/kernel/bad.py:1: imports imagekit.matrix.plan",
    ]
    assert leaks("adapters", package) == [
        "imagekit/adapters/bad.py:1: imports imagekit.verify.run",
        "imagekit/adapters/bad.py:1: imports imagekit.verify.run.VerifyRun",
    ]


def test_the_contract_resolves_relative_imports(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "kernel/bad.py": "from ..adapters import engine\n",
            "kernel/deep/worse.py": "from ...build.run import BuildRun\n",
            "verify/bad.py": "from . import run\nfrom ..cli import common\n",
        },
    )
    assert leaks("kernel", package) == [
        "imagekit/kernel/bad.py:1: imports imagekit.adapters",
        "imagekit/kernel/bad.py:1: imports imagekit.adapters.engine",
        "imagekit/kernel/deep/worse.py:1: imports imagekit.build.run",
        "imagekit/kernel/deep/worse.py:1: imports imagekit.build.run.BuildRun",
    ]
    assert leaks("verify", package) == [
        "imagekit/verify/bad.py:2: imports imagekit.cli",
        "imagekit/verify/bad.py:2: imports imagekit.cli.common",
    ]


def test_a_root_module_keeps_the_rules_of_its_layer(tmp_path: Path) -> None:
    package = _plant(tmp_path, {"errors.py": "import docker\n", "kernel/__init__.py": ""})
    assert leaks("kernel", package) == ["imagekit/errors.py:1: imports docker"]


@pytest.mark.parametrize(
    ("code", "seen"),
    [
        ("import os\nx = os.environ.get('A')\n", "os.environ"),
        ("import os\nx = os.getenv('A')\n", "os.getenv"),
        ("with open('f', 'a') as h:\n    pass\n", "open"),
        ("def f(p):\n    p.write_text('x')\n", "write_text"),
        ("def f(p):\n    return p.read_text()\n", "read_text"),
        ("def f(p):\n    p.mkdir()\n", "mkdir"),
        ("import shutil\n", "shutil"),
    ],
)
def test_the_contract_catches_orchestration_reaching_the_world(
    tmp_path: Path, code: str, seen: str
) -> None:
    path = tmp_path / "bad.py"
    path.write_text(code)
    assert [e.split(": uses ")[1] for e in effects(path)] == [seen]


def test_label_names_are_spelled_only_in_the_labels_module() -> None:
    literal = re.compile(r"""["']io\.imagekit\.""")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in [*PACKAGE.rglob("*.py"), *PROBES.glob("*.py")]
        if path.name != "labels.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []
