"""The package's layers, read from the code's own imports: each layer imports only its own or lower ones, no
modules import each other in a circle, every import is written out (no import by a computed name), no
part reaches into another part's private modules or names, and only the command line parses arguments. `docs/architecture.md` lists the same layers; this test holds the
two together."""

import ast
import re
from pathlib import Path

import pytest

import arjet

PACKAGE = Path(arjet.__file__).parent
DOC = PACKAGE.parents[1] / "docs" / "architecture.md"

# top to bottom: a part may import its own layer and the layers below it, never one above
LAYERS = (
    ("command line", ("cli", "__main__")),
    ("package face", ("__init__",)),
    ("applications", ("app", "serve", "train")),
    ("evaluation", ("eval", "bench")),
    ("engine", ("engine",)),
    ("model sources", ("builtin", "presets", "testing")),
    ("pipelines", ("pipelines",)),
    ("algorithms and codecs", ("samplers", "vq", "addons")),
    ("the decoding contract", ("session",)),
    ("domain and pictures", ("data", "reports")),
    ("foundation", ("checks", "limits", "machine", "quantize", "weights")),
)
LEVEL = {part: len(LAYERS) - index for index, (_, parts) in enumerate(LAYERS) for part in parts}
DYNAMIC_IMPORTS = {"import_module", "__import__", "run_module", "run_path"}


def module_name(path: Path) -> str:
    parts = ["arjet", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {module: ast.parse(path.read_text(encoding="utf-8")) for module, path in MODULES.items()}


def part(module: str) -> str:
    """`arjet.cli.main` -> `cli`, `arjet.checks` -> `checks`, `arjet` -> `__init__` (the package face)."""
    return module.split(".")[1] if "." in module else "__init__"


def _target(base: str, name: str) -> str:
    """`from base import name`: the module `base.name` when there is one, else `base` (a name inside it)."""
    return f"{base}.{name}" if f"{base}.{name}" in MODULES else base


def _from_base(module: str, node: ast.ImportFrom) -> str:
    """The module a `from ... import` in `module` reads from, relative dots resolved."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(anchor + ([node.module] if node.module else []))


def imports(module: str) -> tuple[set[str], list[str]]:
    """The arjet modules `module` imports anywhere in its file (at the top, in functions, for type checking,
    or by a dynamic import of a written-out name), and the dynamic imports whose target is computed."""
    found, computed = set(), []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            found.update(_target(base, alias.name) for alias in node.names)
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in DYNAMIC_IMPORTS:
                argument = node.args[0] if node.args else None
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    found.add(argument.value)
                else:
                    computed.append(f"{module}:{node.lineno}")
    return {name for name in found if name == "arjet" or name.startswith("arjet.")}, computed


GRAPH = {module: imports(module)[0] for module in MODULES}


def test_every_part_has_a_layer():
    assert sorted({part(module) for module in MODULES} - set(LEVEL)) == []


def test_no_import_runs_up_a_layer():
    upward = [
        f"{module} ({part(module)}) imports {target} ({part(target)})"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if LEVEL[part(target)] > LEVEL[part(module)]
    ]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    assert [sorted(circle) for circle in _circles(GRAPH)] == []


def test_every_import_names_its_module():
    assert [where for module in MODULES for where in imports(module)[1]] == []


def test_only_the_command_line_parses_arguments():
    """No parser, option or `sys.argv` below `cli/` (`arjet.checks` only lends argparse its value types)."""
    parsing = {"ArgumentParser", "add_argument", "add_parser", "add_subparsers", "parse_args", "argv"}
    parsers = {
        module
        for module, tree in TREES.items()
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in parsing)
        or (isinstance(node, ast.Name) and node.id in parsing)
    }
    assert parsers and sorted(module for module in parsers if part(module) not in ("cli", "__main__")) == []


def is_private(name: str) -> bool:
    """`_x` and `__x`, not a dunder such as `__init__`."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _bound_names(statement: ast.stmt) -> set[str]:
    """Names a module-level or class-level statement binds: a def, a class, an assignment's plain names."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    targets = statement.targets if isinstance(statement, ast.Assign) else []
    if isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    return {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}


def _is_own_object(node: ast.expr) -> bool:
    """`self`, `cls` or `super()`: an object reaching its own members."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "super"
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def declared_privates(tree: ast.Module) -> set[str]:
    """The private names a file declares: bound at module level or in a class body, or as `self._x = ...`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef)):
            names.update(name for statement in node.body for name in _bound_names(statement))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(
                target.attr
                for target in targets
                if isinstance(target, ast.Attribute) and _is_own_object(target.value)
            )
    return {name for name in names if is_private(name)}


PRIVATES: dict[str, set[str]] = {}  # part -> the private names its files declare
for _module, _tree in TREES.items():
    PRIVATES.setdefault(part(_module), set()).update(declared_privates(_tree))


def private_reaches(module: str) -> list[str]:
    """Places where `module` reaches into another part's private module or name: `import arjet.x._m`,
    `from arjet.x._m import ...`, `from arjet.x.m import _name`, or `expr._name` (`expr` not `self`, `cls`,
    `super()`) where another arjet part declares `_name` and `module`'s own part does not (so third-party
    privates such as diffusers' `_execution_device` pass)."""
    own = part(module)
    found = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            targets = [(alias.name, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            targets = [(_target(base, alias.name), f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute) and is_private(node.attr) and not _is_own_object(node.value):
            owners = sorted(p for p, names in PRIVATES.items() if node.attr in names)
            if owners and own not in owners:
                found.append(f"{module}:{node.lineno} reaches {'/'.join(owners)}'s {node.attr}")
            continue
        else:
            continue
        for target, written in targets:
            arjet_target = target == "arjet" or target.startswith("arjet.")
            if arjet_target and part(target) != own and any(map(is_private, written.split("."))):
                found.append(f"{module}:{node.lineno} imports {written}")
    return found


def test_no_part_reaches_into_another_parts_private_names():
    assert [where for module in MODULES for where in private_reaches(module)] == []


def test_the_layers_are_the_documented_ones():
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if re.match(r"\| \d+ \|", line)]
    documented = [
        tuple(name.strip("/").removesuffix(".py") for name in re.findall(r"`([^`]+)`", row.split("|")[3]))
        for row in rows
    ]
    assert documented == [parts for _, parts in LAYERS]


@pytest.mark.parametrize(
    ("graph", "circles"),
    [({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]), ({"a": {"b"}, "b": set()}, [])],
)
def test_the_circle_finder_finds_circles(graph, circles):
    assert [sorted(circle) for circle in _circles(graph)] == circles


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles
