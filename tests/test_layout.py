"""The shape of ``common/``: packages a newcomer can navigate (README, "Layout").

Read from the source alone (no imports run): every ``import`` in ``common/``, lazy ones inside
functions included, forms a graph of modules that must have no cycle; no module imports an
underscore name from another package; ``common/`` itself holds at most six modules, and no
module in it is over 500 lines. docs/code_map.md says the same as the code: each package's
imports, and every module by name.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = os.path.join(ROOT, "common")


def _modules() -> dict[str, str]:
    """{dotted module name: path} of every module under common/."""
    found = {}
    for folder, _, files in os.walk(COMMON):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(path: str, modules) -> list[tuple[str, str]]:
    """(imported module, imported name or "") for each common import in a file, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("common")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("common"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((sub, "") if sub in modules else (node.module, a.name))
    return out


def _package(module: str) -> str:
    """``common.ppo`` for ``common.ppo`` and ``common.ppo.trainer``; ``common`` for ``common.nets``."""
    top = ".".join(module.split(".")[:2])
    return top if os.path.isdir(os.path.join(ROOT, *top.split("."))) else "common"


def _parents(module: str) -> list[str]:
    """``common.a.b.c`` -> ``[common.a, common.a.b]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def test_common_has_no_import_cycle():
    modules = _modules()
    graph = {m: {dep for dep, _ in _imports(p, modules) if dep in modules and dep != m} for m, p in modules.items()}
    # importing common.x.y runs common/x/__init__.py first: the package counts as imported too
    for m in graph:
        graph[m] |= {
            p for dep in list(graph[m]) for p in _parents(dep) if p in modules and p != m and not m.startswith(p + ".")
        }
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for dep in sorted(graph[m]):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep) :] + [dep] if dep in path else path + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles in common/: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_underscore_name_crosses_a_package():
    modules = _modules()
    bad = []
    for m, path in modules.items():
        for dep, name in _imports(path, modules):
            if name.startswith("_") and _package(dep) != _package(m):
                bad.append(f"{m} imports {dep}.{name}")
    assert not bad, bad


def test_common_is_small_packages_of_short_modules():
    top = [f for f in os.listdir(COMMON) if f.endswith(".py")]
    assert len(top) <= 6, f"{len(top)} modules directly in common/: {sorted(top)}"
    long = {}
    for path in _modules().values():
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > 500:
            long[os.path.relpath(path, ROOT)] = n
    assert not long, f"modules over 500 lines: {long}"


def test_the_wheel_lists_every_package():
    """setup.py names its packages one by one: a new package under common/, and every registered
    game's folder (``python <game>/train.py`` imports ``<game>.env``, found only once installed),
    must be added there."""
    import re

    from common.run.games import GAMES

    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        listed = set(re.findall(r'"(\w+(?:\.\w+)*)"', f.read()))
    packages = {m for m, p in _modules().items() if p.endswith("__init__.py")}
    packages |= {module.split(".")[0] for module in GAMES.values()}
    assert packages <= listed, f"packages missing from setup.py: {sorted(packages - listed)}"


def _unit(module: str) -> str:
    """The code map's name for a module's place: ``ppo`` for ``common.ppo.trainer``, ``nets`` for ``common.nets``."""
    return module.split(".")[1] if module.count(".") else module


def test_the_code_map_lists_each_packages_imports():
    """docs/code_map.md's table says which parts of common/ each part imports: exactly what the code does."""
    import re

    modules = _modules()
    with open(os.path.join(ROOT, "docs", "code_map.md"), encoding="utf-8") as f:
        rows = [line.split("|")[1:-1] for line in f if line.startswith("| `common/")]
    assert rows, "docs/code_map.md has no package table"
    wrong = []
    for where, _, imports in rows:
        named = {name.removesuffix(".py").strip("/").split("/")[-1] for name in re.findall(r"`([\w/.]+)`", where)}
        units = named & {_unit(m) for m in modules}
        listed = set() if "nothing" in imports else set(re.findall(r"`(\w+)`", imports))
        found = {
            _unit(dep)
            for m, path in modules.items()
            if _unit(m) in units
            for dep, _ in _imports(path, modules)
            if _unit(dep) not in units and dep != "common"
        }
        if found != listed:
            wrong.append(f"{where.strip()}: the map says {sorted(listed)}, the code imports {sorted(found)}")
    assert not wrong, wrong


def test_the_code_maps_tree_names_every_module():
    """docs/code_map.md's tree, "module by module", names each module of each package of common/."""
    import re

    with open(os.path.join(ROOT, "docs", "code_map.md"), encoding="utf-8") as f:
        tree = f.read().split("## The tree, module by module", 1)[1].split("```")[1]
    # each package's text runs from its "  name/" line to the next line that starts a package or file
    parts = re.split(r"\n  (?=\w+/ |nets\.py)", tree)
    text = {part.split("/", 1)[0]: part for part in parts[1:] if "/" in part.split()[0]}
    missing = [
        m
        for m in _modules()
        if m.count(".") == 2
        and not m.endswith("__init__")
        and not re.search(rf"\b{m.split('.')[2]}\b", text.get(m.split(".")[1], ""))
    ]
    assert not missing, f"modules the code map's tree does not name: {missing}"
