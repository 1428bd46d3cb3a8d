"""docs/ARCHITECTURE.md against the package itself: the module map lists every module and nothing else, no file
name is used twice, the root stays small, and the layering rule holds on every import (deferred ones too)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tests.support.data import ROOT

PACKAGE = ROOT / "memory_proxy"
PAGE = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
MAX_ROOT_MODULES = 12


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports, relative imports resolved, a name imported from a module read as that
    module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known and target.startswith("memory_proxy."):
                target = target.rpartition(".")[0]
            found.add(target)
    return found


def test_the_module_map_lists_every_module_and_nothing_else() -> None:
    section = PAGE.split("## The module map", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    listed = {path for cell in first_cells for path in re.findall(r"`([\w/]+\.py)`", cell)}
    wanted = {str(path.relative_to(PACKAGE)) for path in modules().values()
              if not (path.name == "__init__.py" and only_a_docstring(path))}
    assert sorted(wanted - listed) == [], "modules missing from docs/ARCHITECTURE.md's module map"
    assert sorted(listed - wanted) == [], "paths in the module map that are not modules of the package"


def test_every_path_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:[a-z_]+/)+[\w.]+\.(?:py|md|sql))`", PAGE))
    missing = [path for path in named if not (PACKAGE / path).exists() and not (ROOT / path).exists()]
    assert missing == []


def test_no_file_name_is_used_twice_and_the_root_stays_small() -> None:
    names = Counter(path.name for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []
    assert len(list(PACKAGE.glob("*.py"))) <= MAX_ROOT_MODULES


def test_the_layering_rule() -> None:
    found = modules()
    known = set(found)

    def reached(folder: str) -> dict[str, set[str]]:
        return {name: imports(name, path, known) for name, path in found.items()
                if name.startswith(f"memory_proxy.{folder}.") or name == f"memory_proxy.{folder}"}

    def outside(folder: str, allowed: tuple[str, ...]) -> list[str]:
        own = f"memory_proxy.{folder}"
        return sorted(f"{name} imports {target}" for name, targets in reached(folder).items() for target in targets
                      if (target.startswith("memory_proxy") or target.split(".")[0] == "litestar")
                      and not target.startswith((own, *allowed)))

    leaves = ("memory_proxy.records", "memory_proxy.job_payload", "memory_proxy.private_files")
    assert outside("store", (*leaves, "memory_proxy.redact")) == []
    assert outside("redact", ("memory_proxy.observability",)) == []
    http_layer = tuple(f"memory_proxy.{name}" for name in ("http", "api", "app", "cli", "tools", "chat"))
    for folder, allowed_chat in (("retrieval", ()), ("formation", ()), ("embedding", ("memory_proxy.chat.upstream",))):
        wrong = [line for line in outside(folder, allowed_chat) if line.split(" imports ")[1].startswith(http_layer)]
        assert wrong == [], folder
    for leaf in ("errors", "records", "tokens"):
        assert [t for t in imports(f"memory_proxy.{leaf}", found[f"memory_proxy.{leaf}"], known)
                if t.startswith("memory_proxy")] == []
    users_of_testing = [name for name, path in found.items() if not name.startswith("memory_proxy.testing")
                        and any(t.startswith("memory_proxy.testing") for t in imports(name, path, known))]
    assert users_of_testing == []


def test_the_layering_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The rule's reader resolves relative imports: a store module reaching the HTTP layer is found."""
    module = tmp_path / "bad.py"
    module.write_text("from ..http import routes\nfrom ..records import Memory\n")
    known = {"memory_proxy.http.routes", "memory_proxy.records"}
    assert imports("memory_proxy.store.bad", module, known) == {"memory_proxy.http.routes", "memory_proxy.records"}


def test_no_test_imports_the_benchmarks() -> None:
    """Tests run a benchmark harness as a command and read what it writes (tests/support/servers.run_benchmark)."""
    importing = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            importing += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] == "benchmarks"]
    assert importing == []
