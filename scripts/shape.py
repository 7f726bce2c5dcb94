"""The shape ratchet: figures of the code's shape that may only go down (`make lint` runs it).

    python scripts/shape.py           # print the figures; exit 1 where one is not its limit
    python scripts/shape.py --figures # print them only

Each figure has a limit in scripts/shape-limits.toml. A figure above its limit fails, naming
what pushed it there. A figure below its limit fails too, asking for the limit to be lowered
to it in the same commit: that is what makes it a ratchet, and the limits walk down to the
targets (issue 27) as the code improves.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = ROOT / "scripts" / "shape-limits.toml"
PACKAGE = "imagekit"
LONG_FUNCTION = 60  # lines, decorators excluded
LONG_HANDLER = 30  # lines of a CLI function's body (its signature holds the options)
BIG_MODULE = 400  # lines
KERNEL = f"{PACKAGE}.kernel"
# The modules that declare the commands' requests besides each feature's `requests.py`: the
# option declarations and the parts several requests share. With the CLI they are what a
# command costs to declare, so they are counted together (moving code between them is no gain).
REQUEST_PARTS = {f"{KERNEL}.options", f"{PACKAGE}.matrix.selection", f"{PACKAGE}.build.inputs"}
# Every spelling of a dictionary whose values the type checker cannot see.
UNTYPED_DICT = r"(?:dict|Mapping|MutableMapping)\[str, (?:Any|object)\]"
VOCABULARY = f"{PACKAGE}/kernel/vocabulary.py"


@dataclass
class Figure:
    """One measured figure and, where it counts things, the things counted (worst first)."""

    value: int
    where: list[str] = field(default_factory=list)


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under `root`."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    end = node.end_lineno or node.lineno
    return end - node.lineno + 1


def _body_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body, its docstring excluded (the signature is the options)."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def imports_of(module: str, path: Path, tree: ast.AST, known: set[str]) -> set[str]:
    """The package's modules `module` imports anywhere in its file (function bodies and
    TYPE_CHECKING blocks included: a circle there is a circle in the design), relative
    imports resolved against the module's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a import b` names module a.b where there is one, else a's attribute b.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def _package_imports(modules: dict[str, Path], trees: dict[str, ast.AST]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. A package's `__init__` is left out of the
    targets when a submodule is meant: importing `a.b` runs `a` first, but `a` importing `a.b`
    back is how packages list their parts, not a circle."""
    known = set(modules)
    graph = {}
    for module, path in modules.items():
        targets = imports_of(module, path, trees[module], known)
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    return graph


def vocabulary_values(root: Path) -> set[str]:
    """The text of every member of every `StrEnum` in the kernel's vocabulary."""
    path = root / VOCABULARY
    if not path.exists():
        return set()
    values = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id == "StrEnum" for b in node.bases
        ):
            values |= {
                item.value.value
                for item in node.body
                if isinstance(item, ast.Assign)
                and isinstance(item.value, ast.Constant)
                and isinstance(item.value.value, str)
            }
    return values


def string_compares(tree: ast.AST, values: set[str]) -> list[int]:
    """The lines where a vocabulary value is compared as text: `x == "slim"`, `x != "cpu"`,
    `x in ("slim", "full")`. The enum member says the same and a typo in it is an error.

    A text left of `in` is a key or a substring looked for (`"error" in item`, `"podman" in
    name`), not a value compared: it is not counted."""

    def texts(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [t for e in node.elts for t in texts(e)]
        return []

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            lefts = [node.left, *node.comparators[:-1]]
            for left, op, right in zip(lefts, node.ops, node.comparators, strict=True):
                membership = isinstance(op, ast.In | ast.NotIn)
                operands = [right] if membership else [left, right]
                if any(v in values for o in operands for v in texts(o)):
                    found.append(node.lineno)
                    break
    return found


def any_tokens(text: str) -> int:
    """How often the name `Any` appears in code (comments and strings are not code)."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return sum(1 for t in tokens if t.type == tokenize.NAME and t.string == "Any")


def measure(root: Path) -> dict[str, Figure]:
    """Every figure of the checkout at `root`."""
    modules = _modules(root)
    texts = {m: p.read_text() for m, p in modules.items()}
    trees = {m: ast.parse(t) for m, t in texts.items()}
    rel = {m: str(p.relative_to(root)) for m, p in modules.items()}
    in_cli = {m for m in modules if m.startswith(f"{PACKAGE}.cli")}
    in_requests = {m for m in modules if m.endswith(".requests") or m in REQUEST_PARTS}
    in_kernel = {m for m in modules if m == KERNEL or m.startswith(KERNEL + ".")}
    values = vocabulary_values(root)

    long_functions, long_cli, long_handlers = [], [], []
    for module, tree in trees.items():
        for node in _functions(tree):
            where = f"{rel[module]}:{node.lineno} {node.name} ({_length(node)} lines)"
            if _length(node) > LONG_FUNCTION:
                long_functions.append((_length(node), where))
                if module in in_cli:
                    long_cli.append((_length(node), where))
            # A command and the function it hands its request to are both the CLI's handler.
            if module in in_cli and _body_length(node) > LONG_HANDLER:
                long_handlers.append(
                    (_body_length(node), f"{rel[module]}:{node.lineno} {node.name} "
                     f"(body {_body_length(node)} lines)")
                )  # fmt: skip

    def counted(pattern: str) -> Figure:
        hits = [(len(re.findall(pattern, texts[m])), rel[m]) for m in modules]
        hits = [(n, f"{where} ({n})") for n, where in hits if n]
        return Figure(sum(n for n, _ in hits), [w for _, w in sorted(hits, reverse=True)])

    def worst(items: list[tuple[int, str]]) -> Figure:
        return Figure(len(items), [where for _, where in sorted(items, reverse=True)])

    sizes = [(len(texts[m].splitlines()), rel[m]) for m in modules]
    cycles = import_cycles(_package_imports(modules, trees))
    readme = root / "README.md"

    def lines(group: set[str]) -> Figure:
        sized = sorted(((len(texts[m].splitlines()), rel[m]) for m in group), reverse=True)
        return Figure(sum(n for n, _ in sized), [f"{where} ({n})" for n, where in sized])

    compares = [(rel[m], line) for m in modules for line in string_compares(trees[m], values)]
    anys = sorted(((any_tokens(texts[m]), rel[m]) for m in modules), reverse=True)
    return {
        "cli_and_requests_lines": lines(in_cli | in_requests),
        "kernel_lines": lines(in_kernel),
        "cli_functions_over_30_lines": worst(long_handlers),
        "untyped_dicts": counted(UNTYPED_DICT),
        "any_tokens": Figure(sum(n for n, _ in anys), [f"{w} ({n})" for n, w in anys if n]),
        "vocabulary_string_compares": Figure(
            len(compares), [f"{where}:{line}" for where, line in compares]
        ),
        "functions_over_60_lines": worst(long_functions),
        "cli_functions_over_60_lines": worst(long_cli),
        "modules_over_400_lines": worst(
            [(n, f"{where} ({n} lines)") for n, where in sizes if n > BIG_MODULE]
        ),
        "import_cycles": Figure(len(cycles), [" <-> ".join(c) for c in cycles]),
        "model_copy_update": counted(r"model_copy\(\s*update="),
        "readme_lines": Figure(len(readme.read_text().splitlines()) if readme.exists() else 0),
    }


# Figures whose limit is a ceiling, not a ratchet: the kernel holds the vocabulary and the
# shared ports by design, so it may grow where a new closed set or port belongs there, up to
# its ceiling; below it is no call to lower anything.
CEILINGS = frozenset({"kernel_lines"})


def check(figures: dict[str, Figure], limits: dict[str, int]) -> list[str]:
    """What is wrong: each figure above its limit (with what counts), each below it (lower the
    limit; a ceiling's figure may stay below), each figure without a limit and each limit
    without a figure."""
    problems = []
    for name, figure in figures.items():
        if name not in limits:
            problems.append(f"{name} = {figure.value} has no limit in {LIMITS.name}")
            continue
        limit = limits[name]
        if figure.value > limit:
            shown = "".join(f"\n    {w}" for w in figure.where[:10])
            problems.append(f"{name} = {figure.value}, above its limit {limit}:{shown}")
        elif figure.value < limit and name not in CEILINGS:
            problems.append(
                f"{name} = {figure.value}, below its limit {limit}: good. Lower the limit to "
                f"{figure.value} in scripts/{LIMITS.name} (the ratchet only goes down)"
            )
    problems += [f"{name}: a limit for no figure" for name in limits if name not in figures]
    return problems


def main() -> int:
    """Measure, print the figures, and compare them with the limits."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", action="store_true", help="print the figures only")
    args = parser.parse_args()
    figures = measure(ROOT)
    limits = tomllib.loads(LIMITS.read_text())["limits"]
    print("shape: " + ", ".join(f"{n} {f.value}/{limits.get(n, '?')}" for n, f in figures.items()))
    if args.figures:
        return 0
    problems = check(figures, limits)
    for problem in problems:
        print(f"shape: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
