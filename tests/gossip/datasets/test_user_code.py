"""A user's ``module:callable`` is found in the working folder first, as ``python -m`` finds it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuized.gossip.datasets.user_code import load_callable
from continuized.gossip.errors import ConfigError


@pytest.fixture(autouse=True)
def forget_modules() -> Iterator[None]:
    """Each test's modules leave with it: the next test's folder may hold the same names."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_module_in_the_working_folder_is_found_without_touching_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "uc_plain.py", "def make():\n    return 'plain'\n")
    monkeypatch.chdir(tmp_path)
    path = list(sys.path)
    assert load_callable("uc_plain:make", "problem")() == "plain"
    assert sys.path == path
    assert sys.modules["uc_plain"].__file__ == str(tmp_path / "uc_plain.py")
    # Loaded once: a second lookup is the same object (the nodes load a factory per node).
    assert load_callable("uc_plain:make", "problem") is sys.modules["uc_plain"].make


def test_packages_namespaces_and_dotted_callables(tmp_path: Path) -> None:
    write(tmp_path / "uc_pkg" / "__init__.py", "")
    write(
        tmp_path / "uc_pkg" / "models.py",
        "class Kit:\n    @staticmethod\n    def make():\n        return 'pkg'\n",
    )
    write(tmp_path / "uc_ns" / "problem.py", "from . import helper\nmake = helper.make\n")
    write(tmp_path / "uc_ns" / "helper.py", "def make():\n    return 'ns'\n")
    assert load_callable("uc_pkg.models:Kit.make", "model", tmp_path)() == "pkg"
    assert load_callable("uc_ns.problem:make", "problem", tmp_path)() == "ns"


def test_the_working_folder_wins_over_an_installed_module_not_yet_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed, here = tmp_path / "site", tmp_path / "here"
    write(installed / "uc_twin.py", "def make():\n    return 'installed'\n")
    write(here / "uc_twin.py", "def make():\n    return 'local'\n")
    monkeypatch.syspath_prepend(str(installed))
    assert load_callable("uc_twin:make", "problem", here)() == "local"


def test_a_module_only_on_the_import_path_is_imported_as_usual(tmp_path: Path) -> None:
    assert load_callable("math:sqrt", "problem", tmp_path)(4.0) == 2.0


def test_a_name_already_imported_from_elsewhere_is_refused_with_both_places(
    tmp_path: Path,
) -> None:
    write(tmp_path / "json.py", "def make():\n    return 'mine'\n")
    with pytest.raises(ConfigError) as caught:
        load_callable("json:make", "problem", tmp_path)
    message = str(caught.value)
    assert "problem 'json:make'" in message
    assert str(tmp_path) in message
    assert str(Path(sys.modules["json"].__path__[0]).resolve()) in message
    assert "rename json.py" in message
    assert "\n" not in message


def test_a_missing_module_names_the_spec_the_folder_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_callable("uc_absent.sub:make", "model", tmp_path, others="valid models: softmax")
    message = str(caught.value)
    assert message == (
        f"model 'uc_absent.sub:make': no module 'uc_absent' in {tmp_path.resolve()} nor on the "
        "Python path; run from the folder that holds uc_absent.py or uc_absent/, or install it; "
        "valid models: softmax"
    )


def test_what_the_module_imports_is_not_looked_up_in_the_folder(tmp_path: Path) -> None:
    # The -P protection: only the module named comes from the folder, never its imports.
    write(tmp_path / "uc_sibling.py", "def make():\n    return 1\n")
    write(tmp_path / "uc_user.py", "import uc_sibling\nmake = uc_sibling.make\n")
    with pytest.raises(ConfigError, match="importing 'uc_user' failed: No module named 'uc_si"):
        load_callable("uc_user:make", "problem", tmp_path)
    assert "uc_user" not in sys.modules  # a failed load leaves nothing half-imported


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("uc_attrs:absent", "module 'uc_attrs' has no callable 'absent'"),
        ("uc_attrs:VALUE", "has no callable 'VALUE'"),
        ("uc_attrs:make:2", "is not module:callable"),
        ("uc-attrs:make", "is not module:callable"),
    ],
)
def test_bad_specs_are_named(tmp_path: Path, spec: str, words: str) -> None:
    write(tmp_path / "uc_attrs.py", "VALUE = 3\n")
    with pytest.raises(ConfigError, match=words):
        load_callable(spec, "problem", tmp_path)
