"""A user's plug-ins: their own losses, miners, backbones, batch samplers and datasets.

A plug-in is a ``.py`` file or an importable module (``--plugin``, a space's ``plugins:``,
``plugins=[...]`` in the Python API; the trial setting ``plugins`` carries them). Importing it
runs its ``@dmlsearch.register_loss(...)``-style decorators (:mod:`dmlsearch._plugin_api`),
which add entries to the registries with the plug-in as their origin
(:func:`~trainables.registry.loading_plugin`). A trial's configuration loads its plug-ins
before any name is looked up (:meth:`TrialConfig.from_flat`), in every process that builds
one: the driver, each Ray worker, ``dmlsearch train``.

A file's text travels with the search to every Ray worker (:func:`carried`, handed to the
trials by ``tune.with_parameters`` and installed there by :func:`provide`), so a node of a
cluster needs neither the file nor the driver's folders; an importable module must be
installed on every node, like any other dependency. A file loaded again after it changed
(a notebook's second search) replaces what it registered before. What dmlsearch registers of its own
while a plug-in imports it is dmlsearch's, not the plug-in's (only the package face's
decorators register for a plug-in).

Everything that goes wrong while a plug-in is imported (a syntax error, a missing import, a
name that clashes with a shipped one) is a one-line :class:`UserError` that names the plug-in.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
import traceback
import types
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry
from dmlsearch.trainables.registry import loading_plugin

__all__ = ["carried", "is_file_plugin", "load_plugins", "loaded_plugins", "plugin_specs",
           "provide", "unload_plugins"]

#: A file's text carried to this process by the search (its path → its text).
_PROVIDED: dict[str, str] = {}
#: What is loaded in this process: a spec → the digest of the text it was loaded from.
_LOADED: dict[str, str] = {}
_FIX = "fix the plug-in, or remove it from --plugin / the space's plugins:"


def is_file_plugin(spec: str) -> bool:
    """Whether ``spec`` names a file (``.py``, or a path) rather than an importable module."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def plugin_specs(given: Iterable[object], *, relative_to: Path | None = None,
                 where: str = "--plugin") -> tuple[str, ...]:
    """The plug-ins as a trial records them: files as absolute paths (relative ones read from
    ``relative_to``, by default the working folder), modules as their dotted names; each
    checked to exist. ``where`` says where they were given, for the errors."""
    specs: list[str] = []
    for item in given:
        if not isinstance(item, (str, Path)) or not str(item).strip():
            raise UserError(f"{where}: expected a .py file or an importable module name, got "
                            f"{item!r}; give e.g. my_loss.py")
        text = str(item).strip()
        if is_file_plugin(text):
            path = Path(text).expanduser()
            if not path.is_absolute():
                path = (relative_to or Path.cwd()) / path
            path = path.resolve()
            if not path.is_file():
                raise UserError(f"{where}: plug-in file {text} does not exist (looked for "
                                f"{path}); expected a .py file; check the path")
            if path.suffix != ".py":
                raise UserError(f"{where}: plug-in {text} is not a .py file; expected a Python "
                                "file or an importable module name")
            text = str(path)
        elif not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", text):
            raise UserError(f"{where}: {text!r} is neither a .py file nor a module name; give "
                            "a path ending in .py or a dotted module name (my_pkg.losses)")
        if text not in specs:
            specs.append(text)
    return tuple(specs)


def carried(specs: Iterable[str]) -> dict[str, str]:
    """The texts of the file plug-ins among ``specs``, for the search to hand to its trials."""
    texts = {}
    for spec in specs:
        if is_file_plugin(spec):
            texts[spec] = _read(spec)
    return texts


def provide(texts: Mapping[str, str]) -> None:
    """In a trial's process: the file plug-ins' texts the search carried here; they are what
    :func:`load_plugins` runs, whether or not the file exists on this node."""
    _PROVIDED.update(texts)


def loaded_plugins() -> dict[str, str]:
    """The plug-ins loaded in this process, each with the digest of its text."""
    return dict(_LOADED)


def unload_plugins() -> None:
    """Forget every plug-in loaded in this process and what it registered (a later search
    loads its own again)."""
    for spec in list(_LOADED):
        _forget(Path(spec).name if is_file_plugin(spec) else spec)
        del _LOADED[spec]
    _PROVIDED.clear()


def load_plugins(specs: Iterable[str]) -> None:
    """Import each plug-in once per process (again when its file's text changed)."""
    for spec in specs:
        if is_file_plugin(spec):
            _load_file(spec)
        else:
            _load_module(spec)


def _read(spec: str) -> str:
    if spec in _PROVIDED:
        return _PROVIDED[spec]
    try:
        return Path(spec).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"plug-in {spec}: cannot read it ({exc}); expected a readable UTF-8 "
                        ".py file; check the path (--plugin, a space's plugins:)") from None


def _load_file(spec: str) -> None:
    text = _read(spec)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if _LOADED.get(spec) == digest:
        return
    label = Path(spec).name
    if spec in _LOADED:  # edited since: its new version replaces what the old registered
        _forget(label)
    name = "dmlsearch_plugin_" + re.sub(r"\W", "_", Path(spec).stem)
    module = types.ModuleType(name)
    module.__file__ = spec
    sys.modules[name] = module
    try:
        with loading_plugin(label):
            exec(compile(text, spec, "exec"), module.__dict__)  # noqa: S102 - the user's plug-in
    except UserError:
        _forget(label)
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of user code: one line naming it
        _forget(label)
        sys.modules.pop(name, None)
        raise UserError(f"plug-in {label} failed to import: {_where(exc, spec)}; {_FIX}") from None
    _LOADED[spec] = digest


def _load_module(spec: str) -> None:
    if spec in _LOADED:
        return
    try:
        with loading_plugin(spec):
            importlib.import_module(spec)
    except UserError:
        _forget(spec)
        raise
    except ModuleNotFoundError as exc:
        _forget(spec)
        if exc.name and spec.startswith(exc.name):
            raise UserError(f"plug-in module {spec} is not importable here (no module named "
                            f"{exc.name!r}); install it on every node, or give its .py file "
                            "to --plugin") from None
        raise UserError(f"plug-in {spec} failed to import: {_where(exc, None)}; {_FIX}") from None
    except BaseException as exc:  # noqa: BLE001 - see _load_file
        _forget(spec)
        raise UserError(f"plug-in {spec} failed to import: {_where(exc, None)}; {_FIX}") from None
    _LOADED[spec] = "module"


def _where(exc: BaseException, path: str | None) -> str:
    """``SyntaxError: invalid syntax (my_loss.py:3)``: the error and the plug-in's line."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{type(exc).__name__}: {exc.msg} ({Path(exc.filename or '?').name}:{exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is None or f.filename == path]
    if mine:
        return f"{message} ({Path(mine[-1].filename).name}:{mine[-1].lineno})"
    return message


def _forget(label: str) -> None:
    for registry in Registry.every():
        registry.forget_plugin(label)
