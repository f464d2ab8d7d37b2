"""The package's layering (docs/architecture.md), read off its source with ``ast``: no import is executed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "opendp_wgm"

#: The package's shared private helpers: their underscore names may be imported from anywhere in the package.
SHARED_PRIVATE = (
    "opendp_wgm._validation",
    "opendp_wgm._partial",
    "opendp_wgm._version",
    "opendp_wgm._spaces",
    "opendp_wgm._interrupt",
    "opendp_wgm._progress",
    "opendp_wgm._docs",
)

#: The layers the privacy maps and the samplers sit under: they must not import these.
UPPER_LAYERS = (
    "opendp_wgm.measurements",
    "opendp_wgm.engines",
    "opendp_wgm.cli",
    "opendp_wgm.audit",
    "opendp_wgm.experiments",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path) -> str:
    """The (sub)package a module file belongs to: ``opendp_wgm.privacy`` for ``privacy/budget.py``."""
    return ".".join(path.relative_to(PACKAGE.parent).parts[:-1])


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every import in ``path`` (``name`` is ``None`` for ``import module``),
    relative imports resolved against the module's package, deferred (function-level) imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(path).split(".")
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.extend((node.lineno, module, alias.name) for alias in node.names)
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


SOURCES = sorted(PACKAGE.rglob("*.py"))


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_the_package_is_found() -> None:
    assert len(SOURCES) > 20 and (PACKAGE / "privacy" / "budget.py") in SOURCES


def test_privacy_and_samplers_import_no_upper_layer() -> None:
    """``privacy/`` and ``samplers/`` hold the maps and the noise: they build on nothing that uses them."""
    offenders = [
        f"{_where(path, line)} imports {module}"
        for path in SOURCES
        if _package_of(path) in ("opendp_wgm.privacy", "opendp_wgm.samplers")
        for line, module, _ in _imports(path)
        if any(module == layer or module.startswith(layer + ".") for layer in UPPER_LAYERS)
    ]
    assert offenders == [], "\n".join(offenders)


def _package_of_module(module: str) -> str:
    """The package that the dotted ``module`` lives in: itself for a package, its parent for a module file."""
    return module if PACKAGE.parent.joinpath(*module.split(".")).is_dir() else module.rpartition(".")[0]


def _private_import_offenders() -> list[str]:
    """Every import of a private name (``_x``: an attribute or a module) from outside the importer's own
    (sub)package, its ancestors' own helpers and the shared private helpers, as ``file:line imports module.name``."""
    offenders = []
    for path in SOURCES:
        own = _package_of(path)
        for line, module, name in _imports(path):
            if not module.startswith("opendp_wgm"):
                continue
            dotted = module if name is None else f"{module}.{name}"
            if not any(_is_private(part) for part in dotted.split(".")):
                continue
            if any(dotted == shared or dotted.startswith(shared + ".") for shared in SHARED_PRIVATE):
                continue
            # `from package import _module` reaches into the package; `from module import _name` into the module
            is_module = PACKAGE.parent.joinpath(*dotted.split(".")).with_suffix(".py").is_file()
            source = _package_of_module(dotted if is_module else module)
            if not (own == source or own.startswith(source + ".")):  # a package's helpers serve its subpackages
                offenders.append(f"{_where(path, line)} imports {dotted}")
    return offenders


def test_no_private_name_crosses_a_subpackage() -> None:
    """A private name (``_x``, not a dunder) is imported only within its own (sub)package (or by that package's
    subpackages), or from the shared private helpers (``_validation``, ``_partial``, ``_version``, ``_spaces``, ``_interrupt``, ``_progress``, ``_docs``)."""
    offenders = _private_import_offenders()
    assert offenders == [], f"{len(offenders)} private imports across subpackages:\n" + "\n".join(offenders)


@pytest.mark.parametrize("helper", SHARED_PRIVATE)
def test_the_shared_helpers_exist(helper: str) -> None:
    assert PACKAGE.parent.joinpath(*helper.split(".")).with_suffix(".py").is_file()


def test_the_kernel_imports_no_measurement() -> None:
    """``kernel/`` chooses and runs the histogram's plans on the engines: the measurements build on it, never the
    other way round (nor on the CLI, the auditor or the experiments)."""
    upper = ("opendp_wgm.measurements", "opendp_wgm.cli", "opendp_wgm.audit", "opendp_wgm.experiments")
    offenders = [
        f"{_where(path, line)} imports {module}"
        for path in SOURCES
        if _package_of(path) == "opendp_wgm.kernel"
        for line, module, _ in _imports(path)
        if any(module == layer or module.startswith(layer + ".") for layer in upper)
    ]
    assert offenders == [], "\n".join(offenders)
    assert any(_package_of(path) == "opendp_wgm.kernel" for path in SOURCES)


def _module_file(module: str) -> Path | None:
    """The source file of a package module (``None`` for a module outside the package, or a name that is not one)."""
    if module != "opendp_wgm" and not module.startswith("opendp_wgm."):
        return None
    base = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _reached(start: list[Path]) -> dict[str, str]:
    """Every package module the files ``start`` import, directly or through other package modules (deferred
    imports included), each with the module that first imports it."""
    seen: dict[str, str] = {}
    todo = list(start)
    while todo:
        path = todo.pop()
        for _, module, name in _imports(path):
            for target in (module, f"{module}.{name}" if name else module):
                found = _module_file(target)
                if found is not None and target not in seen:
                    seen[target] = _module_name(path)
                    todo.append(found)
    return seen


def test_the_kernel_reaches_no_measurement_through_the_engines() -> None:
    """Not even through the engines it runs on: no module the kernel imports, directly or not, is a measurement
    (the engines once imported 16 names from the measurements, up the layers)."""
    kernel = [path for path in SOURCES if _package_of(path) == "opendp_wgm.kernel"]
    reached = _reached(kernel)
    offenders = [f"{module} (imported by {by})" for module, by in sorted(reached.items())
                 if module.startswith("opendp_wgm.measurements")]
    assert offenders == [], "\n".join(offenders)
    assert "opendp_wgm.engines.polars" in reached


#: The longest a module may be (docs/architecture.md): one concept per module.
MAX_LINES = 600

def test_no_module_is_longer_than_600_lines() -> None:
    lengths = {str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
               for path in SOURCES}
    offenders = [f"{name}: {lines} lines" for name, lines in sorted(lengths.items())
                 if lines > MAX_LINES]
    assert offenders == [], "\n".join(offenders)


#: Engine modules that adapt a measurement to another framework, rather than run the kernel's steps: they may
#: build on the measurements (the Tumult adapter wraps the package's measurements as Tumult Core ones).
ADAPTERS = ("opendp_wgm.engines.tumult",)


def test_the_engines_import_no_measurement() -> None:
    """``engines/`` runs the kernel's steps on Polars and Spark; the measurements choose the engine by their input
    space and build on it, never the other way round (one API: no constructor is declared twice)."""
    upper = ("opendp_wgm.measurements", "opendp_wgm.cli", "opendp_wgm.audit", "opendp_wgm.experiments")
    offenders = [
        f"{_where(path, line)} imports {module}"
        for path in SOURCES
        if _package_of(path) == "opendp_wgm.engines" and _module_name(path) not in ADAPTERS
        for line, module, _ in _imports(path)
        if any(module == layer or module.startswith(layer + ".") for layer in upper)
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_spark_engine_declares_no_constructor() -> None:
    """One constructor per mechanism: the Spark engine defines no ``make_*``/``then_*`` (it holds the engine's
    steps; ``opendp_wgm.make_wgm`` and the others run on it when given its input space)."""
    tree = ast.parse((PACKAGE / "engines" / "spark.py").read_text(encoding="utf-8"))
    declared = [
        target.id if isinstance(target, ast.Name) else getattr(target, "name", "")
        for node in tree.body
        for target in (node.targets if isinstance(node, ast.Assign) else [node])
    ]
    assert [name for name in declared if name.lstrip("_").startswith(("make_", "then_"))] == []


def _lazy_facades() -> list[Path]:
    return [
        path for path in SOURCES if "= _lazy_exports(__name__" in path.read_text(encoding="utf-8")
    ]


def _literal(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return ast.literal_eval(node.value) if node.value is not None else None
    raise AssertionError(f"no literal {name}")


@pytest.mark.parametrize("path", _lazy_facades(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_lazy_facade_lists_each_name_once_in_all_three_places(path: Path) -> None:
    """A lazy facade (PEP 562) names each public name three times: its ``TYPE_CHECKING`` import (what type
    checkers and the layering checks above read), ``_EXPORTS`` (what runs) and ``__all__``. They must agree, or
    a name type-checks but fails at run time (or the layering test reads a module the facade never imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exports = _literal(tree, "_EXPORTS")
    public = _literal(tree, "__all__")
    assert isinstance(exports, dict) and isinstance(public, list)
    checked: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    checked.update({alias.asname or alias.name: inner.module for alias in inner.names})
    assert sorted(public) == sorted(exports), "__all__ and _EXPORTS name different sets"
    assert len(set(public)) == len(public), "a name stands twice in __all__"
    assert checked == exports, "the TYPE_CHECKING import and _EXPORTS disagree on a name's module"


@pytest.mark.parametrize("path", _lazy_facades(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_lazy_facade_resolves_every_name(path: Path) -> None:
    import importlib

    module = importlib.import_module(_module_name(path))
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(module._EXPORTS[name]), name)
