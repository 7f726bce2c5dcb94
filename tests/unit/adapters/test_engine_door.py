"""One door to the engine: `DockerEngine` (adapters/engine.py) holds the one connection, the
other adapters are built from it, and the CLI opens it (`open_engine`) and hands it on without
ever holding the SDK's client. Each rule is also run on a planted violation."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "imagekit"
DOOR = "engine.py"  # the adapter that owns the connection


def raw_clients(root: Path = PACKAGE) -> list[str]:
    """`file:line` of each annotation that names the SDK's client outside the engine door: a
    function, class or field that takes `docker.DockerClient` instead of the engine."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "adapters" and path.name == DOOR:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "DockerClient":
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def cli_reaches(root: Path = PACKAGE) -> list[str]:
    """`file:line: what` for each way the CLI could hold a raw client: importing docker or the
    door's `connect`, or reading an engine's `.client`."""
    found = []
    for path in sorted((root / "cli").rglob("*.py")):
        where = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(
                a.name.split(".")[0] == "docker" for a in node.names
            ):
                found.append(f"{where}:{node.lineno}: imports docker")
            elif isinstance(node, ast.ImportFrom):
                if (node.module or "").split(".")[0] == "docker":
                    found.append(f"{where}:{node.lineno}: imports docker")
                elif any(a.name == "connect" for a in node.names):
                    found.append(f"{where}:{node.lineno}: imports connect")
            elif isinstance(node, ast.Attribute) and node.attr == "client":
                found.append(f"{where}:{node.lineno}: reads .client")
    return found


def test_only_the_engine_door_names_the_sdk_client() -> None:
    assert raw_clients() == []


def test_the_cli_never_holds_a_raw_client() -> None:
    assert cli_reaches() == []


def test_the_rules_see_planted_violations(tmp_path: Path) -> None:
    package = tmp_path / "imagekit"
    (package / "adapters").mkdir(parents=True)
    (package / "cli").mkdir()
    (package / "adapters" / DOOR).write_text("def connect() -> docker.DockerClient: ...\n")
    (package / "adapters" / "bad.py").write_text("def f(client: docker.DockerClient): ...\n")
    (package / "cli" / "bad.py").write_text(
        "import docker\nfrom imagekit.adapters.engine import connect\nx = engine.client\n"
    )
    assert raw_clients(package) == ["imagekit/adapters/bad.py:1"]
    assert cli_reaches(package) == [
        "imagekit/cli/bad.py:1: imports docker",
        "imagekit/cli/bad.py:2: imports connect",
        "imagekit/cli/bad.py:3: reads .client",
    ]
