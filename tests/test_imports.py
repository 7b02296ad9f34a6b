"""The import graph stays layered: finesweep's modules import each other at the top, without a cycle; an
import inside a function guards a heavy or optional library (the rest of finesweep loads without it); training
imports nothing from the export's serving package. Read from the sources (ast), nothing imported."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "spaces", "trainer")
# What a function-level import may put off: libraries that take seconds to import or may not be installed.
HEAVY = {"torch", "transformers", "ray", "mlflow", "bitsandbytes", "onnxruntime", "onnx", "onnxscript", "torchao",
         "peft", "datasets", "optuna", "accelerate", "deepspeed", "llama_cpp", "gguf", "matplotlib"}
# The CLI dispatches lazily so that `finesweep --help` answers at once: its imports are its own business.
LAZY_BY_DESIGN = {"finesweep.search.cli"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(["finesweep", *(parts[:-1] if parts[-1] == "__init__" else parts)])


MODULES = {_module_name(path): path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an import statement loads (for `from package import module`, the module too)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not node.module or node.level:
        return set()
    return {node.module} | {f"{node.module}.{alias.name}" for alias in node.names
                            if f"{node.module}.{alias.name}" in MODULES}


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


@cache
def top_level_imports(module: str) -> frozenset[str]:
    """What importing `module` runs: its top-level imports (try/if bodies included, TYPE_CHECKING blocks not) and
    its parent packages."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_imported(node))
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body), visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body), visit(node.orelse), visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(_tree(module).body)
    parts = module.split(".")
    found.update(".".join(parts[:end]) for end in range(2, len(parts)))
    return frozenset(found)


@cache
def libraries_loaded(module: str) -> frozenset[str]:
    """The third-party and standard libraries importing `module` loads, through finesweep's own modules."""
    seen, stack, libraries = set(), [module], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:
            stack.extend(top_level_imports(name))
        elif not name.startswith("finesweep"):
            libraries.add(name.split(".")[0])
    return frozenset(libraries)


def function_level_imports() -> list[tuple[str, int, ast.ImportFrom | ast.Import]]:
    found = []
    for module in MODULES:
        for function in ast.walk(_tree(module)):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [(module, node.lineno, node) for node in ast.walk(function)
                          if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                              name.startswith("finesweep") for name in _imported(node))]
    return found


def test_finesweeps_modules_import_each_other_without_a_cycle():
    """A package's __init__ runs before its modules (an edge Python resolves), so only the imports written count."""
    graph = {module: {name for name in top_level_imports(module) if name in MODULES
                      and not module.startswith(name + ".")} for module in MODULES}
    state: dict[str, str] = {}

    def cycle_from(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return [*path, module, imported]
            if imported not in state and (found := cycle_from(imported, [*path, module])):
                return found
        state[module] = "done"
        return None

    for module in MODULES:
        if module not in state:
            assert not (found := cycle_from(module, [])), " -> ".join(found)


def test_an_import_inside_a_function_guards_a_heavy_library():
    """Importing a finesweep module inside a function is for putting off a heavy library (HEAVY) that the importing
    module does not load already; any other belongs at the top."""
    needless = []
    for module, line, node in function_level_imports():
        if module in LAZY_BY_DESIGN:
            continue
        postponed = set().union(*(libraries_loaded(name) for name in _imported(node) if name in MODULES))
        if not (postponed - libraries_loaded(module)) & HEAVY:
            needless.append(f"{MODULES[module].relative_to(REPO)}:{line} {ast.unparse(node)}")
    assert not needless, "imports to move to the top of their module:\n" + "\n".join(needless)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("finesweep.trainer.")
                                          and not m.startswith("finesweep.trainer.serving")))
def test_training_imports_nothing_from_the_serving_package(module):
    imported = set(top_level_imports(module)) | {name for owner, _, node in function_level_imports() if owner == module
                                                 for name in _imported(node)}
    assert not {name for name in imported if name.startswith("finesweep.trainer.serving")}


def test_tests_mirror_the_subpackages():
    """tests/<package>/<subpackage>/ holds the tests of <package>/<subpackage>/: a test folder without its subpackage
    is a stale one."""
    folders = [path.parent for path in (REPO / "tests").glob("*/*/__init__.py")]
    assert folders, "tests/ has subpackage folders"
    for folder in folders:
        source = REPO / folder.relative_to(REPO / "tests")
        assert (source / "__init__.py").is_file(), f"{folder.relative_to(REPO)}: no package {source.relative_to(REPO)}"

