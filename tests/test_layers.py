"""The layers stay visible: the pure core imports no adapter, orchestration talks to the world
only through the ports, adapters never reach up into orchestration or the CLI.

`make lint` runs this file, so a leak fails before any other test runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "imagekit"
PROBES = PACKAGE.parent / "probes"

# Modules each layer may not import (a prefix matches the module and everything below it).
EFFECTS = ("docker", "requests", "subprocess", "testinfra", "socket", "urllib.request", "typer")
FORBIDDEN = {
    "core": ("imagekit.adapters", "imagekit.orchestration", "imagekit.cli", *EFFECTS),
    "orchestration": ("imagekit.adapters", "imagekit.cli", *EFFECTS),
    "adapters": ("imagekit.orchestration", "imagekit.cli"),
}


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module `path` imports, with its line (relative imports resolved)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def leaks(layer: str) -> list[str]:
    """`file:line: imports X` for every forbidden import in one layer."""
    banned = FORBIDDEN[layer]
    found = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for line, module in imports(path):
            if any(module == b or module.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}")
    return sorted(set(found))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_it_may(layer: str) -> None:
    assert leaks(layer) == []


def test_the_contract_catches_a_core_module_that_imports_docker(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from __future__ import annotations\nimport docker.errors\n")
    assert (2, "docker.errors") in imports(bad)
    assert any(m.startswith("docker") for _, m in imports(bad))


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
