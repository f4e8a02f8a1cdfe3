"""docs/architecture.md is true and whole: what it names exists, and it names every package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("gossip", "node", "coordinator", "cli")

# `gossip/model/mixing.py`, `node/`, `coordinator/dashboard/`, `gossip.model.mixing`
_PATH = re.compile(r"`((?:gossip|node|coordinator|cli|tests)(?:/[\w.]+)*/?)`")
_DOTTED = re.compile(r"`((?:gossip|node|coordinator|cli)(?:\.\w+)+)`")
_BARE_MODULE = re.compile(r"`(\w+\.py)`")


def _named_paths(text: str) -> set[str]:
    """Paths in backquotes, less placeholders such as ``cli/NAME_cmd.py``."""
    return {m.group(1) for m in _PATH.finditer(text) if "NAME" not in m.group(1)}


def _packages() -> list[str]:
    """Every package of the four, as ``gossip/model/``."""
    found = []
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            found.append(init.parent.relative_to(ROOT).as_posix() + "/")
    return found


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text()
    missing = [p for p in sorted(_named_paths(text)) if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_dotted_module_the_page_names_exists() -> None:
    text = PAGE.read_text()
    missing = []
    for dotted in sorted({m.group(1) for m in _DOTTED.finditer(text)}):
        parts = dotted.split(".")
        # The longest prefix that is a module or package; a remainder must be its attribute.
        for cut in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:cut])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                break
        else:
            missing.append(dotted)
            continue
        if len(parts) - cut > 1:
            missing.append(dotted)  # at most one attribute after the module
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_named_in_a_package_row_exists() -> None:
    """The package table names its modules bare (``mixing.py``): each is in that package."""
    missing = []
    for line in PAGE.read_text().splitlines():
        row = re.match(r"\| `((?:gossip|node|coordinator)/\w+/)` \|(.*)\|$", line)
        if row is None:
            continue
        package, cells = row.groups()
        for name in _BARE_MODULE.findall(cells):
            if not (ROOT / package / name).is_file():
                missing.append(package + name)
    assert not missing, f"the package table names modules that do not exist: {missing}"


def test_the_page_names_every_package() -> None:
    named = _named_paths(PAGE.read_text())
    unnamed = [p for p in _packages() if p not in named and p.rstrip("/") not in named]
    assert not unnamed, f"docs/architecture.md does not name these packages: {unnamed}"


def test_every_module_is_in_its_package_row() -> None:
    """Each module of a subpackage with a row of its own is named in that row."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        row = re.match(r"\| `((?:gossip|node|coordinator)/\w+/)` \|(.*)\|$", line)
        if row is not None:
            rows[row.group(1)] = set(_BARE_MODULE.findall(row.group(2)))
    listed = {p: names for p, names in rows.items() if names}  # rows that list their files
    assert "gossip/exchange/" in listed
    assert "gossip/model/" in listed
    # Every subpackage of the node and the coordinator lists its files.
    for top in ("node", "coordinator"):
        for init in sorted((ROOT / top).glob("*/__init__.py")):
            assert init.parent.relative_to(ROOT).as_posix() + "/" in listed, init.parent
    left_out = [
        package + path.name
        for package, names in listed.items()
        for path in sorted((ROOT / package).glob("*.py"))
        if path.name != "__init__.py" and not path.name.startswith("_") and path.name not in names
    ]
    assert not left_out, f"modules missing from their package's row: {left_out}"


# A process start names its module in a string, where import-linter does not look.
_STARTED = re.compile(
    r"""python_module\(\s*(?:f?["']([\w.{}]+)["'])?|["']-m["'],\s*["']([\w.]+)["']"""
)
_LAYER = {"gossip": 1, "node": 2, "coordinator": 2, "cli": 3}


def _process_starts() -> list[tuple[str, str | None]]:
    """``(file, module)`` for every module path a package starts (``None``: passed in)."""
    found = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for m in _STARTED.finditer(path.read_text()):
                found.append((path.relative_to(ROOT).as_posix(), m.group(1) or m.group(2)))
    return found


def test_no_package_starts_a_process_of_a_layer_above_it_or_beside_it() -> None:
    """A started module belongs to the starter's layer or one below: never above, never the
    independent neighbour (the node starts no coordinator module, nor the reverse)."""
    starts = _process_starts()
    assert any(module == "continuized.coordinator.machine.offload" for _, module in starts), starts
    wrong = []
    for file, module in starts:
        if module is None:
            continue  # a module passed in from the layer above (cli/entries.py)
        installed, _, inside = module.partition(".")
        starter, started = file.split("/")[0], inside.split(".")[0]
        if installed != "continuized" or started not in _LAYER:
            wrong.append((file, module))  # a module of no package of ours
        elif _LAYER[started] > _LAYER[starter] or (
            _LAYER[started] == _LAYER[starter] and started != starter
        ):
            wrong.append((file, module))
    assert not wrong, f"process starts of a layer above or beside the starter: {wrong}"


_OLD_IMPORT = re.compile(r"^\s*(?:>>> )?(?:from|import) (?:gossip|node|coordinator|cli)\b", re.M)


def test_the_code_imports_the_one_installed_name() -> None:
    """The four folders are importable only as ``continuized.<folder>``: an import of a bare
    ``gossip`` or ``node`` would work from the checkout and fail from the wheel."""
    sources = [p for top in (*PACKAGES, "tests", "benchmarks", "scripts", "examples")
               for p in sorted((ROOT / top).rglob("*.py"))]  # fmt: skip
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert len(sources) > 300, len(sources)
    bare = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in (*sources, *pages)
        if path.name != "changelog.md"
        for text in [path.read_text()]
        for m in _OLD_IMPORT.finditer(text)
    ]
    assert not bare, f"imports of a top-level name the wheel does not install: {bare}"


def test_every_child_python_is_started_without_the_current_folder_on_its_path() -> None:
    """``python -m`` puts the current folder first on the import path; ``-P`` does not."""
    bare = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for line in path.read_text().splitlines():
                if re.search(r"""["']-m["']""", line) and not re.search(r"""["']-P["']""", line):
                    bare.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not bare, f"children started with -m but not -P: {bare}"


def test_ports_are_probed_in_one_module() -> None:
    """A trial bind on a plain socket (is this port free?) lives in coordinator/machine/ports.py.

    Servers bind their own sockets; what is counted here is a probe: a ``socket.socket`` made
    only to bind it.
    """
    probe = re.compile(r"socket\.socket\([^)]*\)(?:\s+as\s+(\w+))?")
    probing = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text()
            for m in probe.finditer(text):
                name = m.group(1)
                if name is not None and re.search(rf"\b{name}\.bind\(", text):
                    probing.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(probing)) == ["coordinator/machine/ports.py"], probing


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code: not its docstrings (their examples show
    topics as values, which is what the reader needs there)."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    ]


def test_topics_are_spelled_in_one_module() -> None:
    """The MQTT topics' layout (``gossip/<cluster>/...``) is gossip/wire/pubsub.py's alone."""
    topic = re.compile(r"^gossip/|/node/|/control$|/coordinator/status|/submit/|/result/")
    spelled = sorted(
        {
            path.relative_to(ROOT).as_posix()
            for top in PACKAGES
            for path in (ROOT / top).rglob("*.py")
            for text in _code_strings(path)
            if topic.search(text)
        }
    )
    assert spelled == ["gossip/wire/pubsub.py"], spelled
