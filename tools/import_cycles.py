"""Import cycles among the repository's own modules: `python tools/import_cycles.py` (exit 1 if any).

Reads every .py file under memory_proxy/, benchmarks/, tests/ and tools/ with `ast` (nothing is imported),
takes each `import` and `from … import` (relative ones resolved; those inside functions too, since a
deferred import is still a dependency) and prints every strongly connected group of more than one module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("memory_proxy", "benchmarks", "tests", "tools")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """The repository modules `path` (module `name`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from a import b`: b is a module or a name in a
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    files = {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    known = set(files)
    graph = {name: set(imported(path, name, known)) - {name} for name, path in files.items()}
    # a package's __init__ is imported before its modules: an edge module -> its own package is no cycle
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    found = cycles(graph)
    for group in found:
        print("import cycle: " + " <-> ".join(group))
    print(f"{len(files)} modules, {sum(map(len, graph.values()))} imports between them, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
