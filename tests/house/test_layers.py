"""The layer order of profan/, as a test: imports run down the floors only, and no module circle exists.

Why: the folders show the pipeline (app → pipeline → diagnosis → analyses → ranks → sources → rulepack → model);
a module that imports a floor above it makes the lower floor depend on the upper one and, sooner or later, a
circle. The graph comes from the source's AST (module-level imports and those inside functions alike; imports
under `if TYPE_CHECKING:` are left out because they never run), so no tool is needed.

Floors, top to bottom. `render` and `figures` sit beside `app` and below it (render above figures: the
reports embed the charts); `comparison` sits beside `pipeline` (it reads two reports that the pipeline made and
builds its own findings with the model's types); `synth` makes test captures and sits with `app`; `trust`
(report seals) and `schema` sit at the ground with `model`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "profan"

# the floor of each top-level part of profan/ (a higher number is a higher floor)
FLOORS = {
    "__main__": 10,
    "app": 10,
    "synth": 10,
    "render": 9,
    "figures": 8,
    "pipeline": 7,
    "comparison": 7,
    "diagnosis": 6,
    "analyses": 5,
    "ranks": 4,
    "sources": 3,
    "rulepack": 2,
    "model": 1,
    "trust": 1,
    "__init__": 0,
}

# the edges that still run upward, each with its reason; the list may only shrink
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The profan modules one file imports: `from x import y` counts x.y where that is a module, else x."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("profan"))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            if base.startswith("profan"):
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join([*parts[:keep], *([node.module] if node.module else [])])


def import_graph() -> dict[str, set[str]]:
    """Each profan module and the profan modules it imports (names that are not modules dropped)."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = _imports(tree, module, path.name == "__init__.py", set(files))
        graph[module] = {target for target in targets if target in files and target != module}
    return graph


def floor_of(module: str) -> tuple[str, int]:
    parts = module.split(".")
    part = parts[1] if len(parts) > 1 else "__init__"
    return part, FLOORS[part]


def upward_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a floor to a higher one (within one part, any direction is fine)."""
    edges = []
    for source, targets in graph.items():
        for target in targets:
            source_part, source_floor = floor_of(source)
            target_part, target_floor = floor_of(target)
            if source_part != target_part and target_floor > source_floor and source_part != "__init__":
                edges.append((source, target))
    return sorted(edges)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_part_has_a_floor() -> None:
    parts = {floor_of(module)[0] for module in import_graph() if module != "profan"} - set(FLOORS)
    assert not parts, f"parts of profan/ with no floor in FLOORS: {sorted(parts)}"


def test_imports_run_down_the_floors() -> None:
    edges = [edge for edge in upward_edges(import_graph()) if edge not in ALLOWED_UPWARD]
    assert not edges, "imports that run up a floor:\n" + "\n".join(f"{src} -> {dst}" for src, dst in edges)


def test_allowed_edges_still_exist() -> None:
    gone = set(ALLOWED_UPWARD) - set(upward_edges(import_graph()))
    assert not gone, f"edges fixed: remove them from ALLOWED_UPWARD: {sorted(gone)}"


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(part) for part in found)
