"""A user's own ``module:callable`` (a problem, a model), found as ``python -m`` finds a module.

Every process of the project starts as ``python -P -m continuized.cli.app`` (the console script
does the same): the current folder is NOT on the import path, so that a user's ``cli/`` or
``numpy.py`` can never shadow a module the project imports. A user naming their own module
(``--problem mymod:make``, ``--model examples.linear_svm_model:make``) still expects it to be
found where ``python -m mymod`` would find it: in the current folder. :func:`load_callable` does
that lookup, for the module named and for nothing else.

The rule
--------
* The module's top-level package (``examples`` of ``examples.linear_svm_model``) is looked for
  in ``folder`` (the current working directory unless given) first, as ``python -m`` puts the
  current folder first: ``mymod.py``, ``mymod/`` with an ``__init__.py``, or a plain folder
  ``mymod/`` (a namespace package). Found there, it is loaded from there, under its own name in
  ``sys.modules`` (so later imports and pickles see the same module), and its submodules come
  from its folder.
* Not found there, it is imported as any module is, from the import path (an installed
  package of the user's works as before).
* A name collision: a module of that name that this process has already imported from
  elsewhere (numpy, a standard module, the project's own) cannot be loaded a second time under
  the same name. ``python -m`` would have taken the folder's from the start, but here the other
  one is already in use: that is an error naming both places, whose fix is to rename the
  user's module. A name not yet imported is taken from the folder, as ``python -m`` would.
* Only the named module is looked up in the folder; what it imports in turn is imported as
  usual. The folder is never put on ``sys.path``, which keeps ``-P``'s protection whole: a
  helper beside the module is imported relatively, from a package (``from . import helper``),
  or through the package's name (``from examples import helper``).

It lives beside the data sources, which also read what the user names from the folder they
run in (``svmlight:PATH``, ``npz:PATH``), and which the problems and the models import already:
:mod:`gossip.files` would put the problems and the training above the simulator's outputs.

The node processes of ``gossip up`` inherit its working directory (neither the fork server
nor its children change it), so they find the module where ``gossip up`` did; ``gossip node``
started by hand finds it in its own working directory.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from continuized.gossip.errors import ConfigError

__all__ = ["load_callable"]


def load_callable(
    spec: str, what: str, folder: str | os.PathLike[str] | None = None, *, others: str = ""
) -> Any:
    """Return the object ``callable`` of ``spec = "package.module:callable"``.

    Parameters
    ----------
    spec : str
        ``module:callable``; ``callable`` may be dotted (``mymod:Factory.make``).
    what : str
        What the spec gives, for the messages (``"problem"``, ``"model"``).
    folder : path, optional
        Where the module is looked for first (module docstring); default: the working directory.
    others : str
        The other valid specs, appended to the message of a spec that names no module (a typo
        of a built-in kind is one), e.g. ``"valid models: softmax, mlp:H"``.

    Raises
    ------
    ConfigError
        The spec is not ``module:callable``; its module cannot be found or fails to import;
        it names a module already imported from another place; or it has no such callable.
        Each message names the spec, the folder searched and the fix.
    """
    module_name, _, attr = spec.strip().partition(":")
    parts = module_name.split(".") + attr.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ConfigError(
            f"{what} {spec!r} is not module:callable, e.g. mymodule:make" + _also(others)
        )
    where = Path(os.getcwd() if folder is None else folder).resolve()
    module = _import(spec, what, module_name, where, others)
    found: Any = module
    for name in attr.split("."):
        found = getattr(found, name, None)
    if not callable(found):
        raise ConfigError(f"{what} {spec!r}: module {module_name!r} has no callable {attr!r}")
    return found


def _also(others: str) -> str:
    return f"; {others}" if others else ""


def _import(spec: str, what: str, module_name: str, folder: Path, others: str) -> ModuleType:
    top = module_name.partition(".")[0]
    local = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
    try:
        if local is not None:
            _load_top(spec, what, local, folder)
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            # The module named (or a package on its way) is missing; not one it imports.
            raise ConfigError(
                f"{what} {spec!r}: no module {exc.name!r} in {folder} nor on the Python path; "
                f"run from the folder that holds {top}.py or {top}/, or install it" + _also(others)
            ) from None
        raise ConfigError(f"{what} {spec!r}: importing {module_name!r} failed: {exc}") from None
    except ImportError as exc:
        raise ConfigError(f"{what} {spec!r}: importing {module_name!r} failed: {exc}") from None


def _load_top(spec: str, what: str, local: importlib.machinery.ModuleSpec, folder: Path) -> None:
    """Put the folder's top-level module in ``sys.modules`` (once), or refuse a collision."""
    top = local.name
    here = _location(local.origin if local.has_location else None, local.submodule_search_locations)
    assert here is not None  # a spec PathFinder found has a file or a folder
    loaded = sys.modules.get(top)
    if loaded is not None:
        there = _location(getattr(loaded, "__file__", None), getattr(loaded, "__path__", None))
        if there != here:
            raise ConfigError(
                f"{what} {spec!r}: {top!r} in {folder} has the name of a module already "
                f"imported from {there or 'the interpreter'}; rename {here.name} (e.g. my_{top})"
            )
        return
    module = importlib.util.module_from_spec(local)
    sys.modules[top] = module
    try:
        assert local.loader is not None  # PathFinder's specs have one (namespaces' too)
        local.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)
        raise


def _location(file: str | None, search: object) -> Path | None:
    """A module's own file, or its package's folder (the first, for a namespace)."""
    if search is not None:
        folders = list(search)  # type: ignore[call-overload]
        return Path(folders[0]).resolve() if folders else None
    return Path(file).resolve() if file else None
