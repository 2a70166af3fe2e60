"""A space file's YAML, read node by node so that every error names its file and line: the
loader (``1e-3`` is a float, as in YAML 1.2), and :class:`Nodes`, the primitives the space and
param readers build on (a mapping with known fields, text, a single value, a config key)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.spaces._space import KEY_PATTERN
from dmlsearch.trainables.errors import UserError

__all__ = ["EXAMPLE", "Fields", "Node", "Nodes", "parse_value"]

EXAMPLE = "see spaces/files/quickstart.yaml for an example"

Node = yaml.Node
Fields = dict[str, tuple[Node, Node]]


class YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-3`` / ``5E+2`` (no dot) as floats, like YAML 1.2."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_value(text: str) -> Any:
    """One value as a space file reads it (YAML, with ``1e-3`` a float), e.g. from ``--set``."""
    loader = YamlLoader(text)  # a SafeLoader: plain data only
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class Nodes:
    """The YAML nodes of one space file (``path``): each reader turns a node into a value or a
    one-line :class:`UserError` naming the file, the line, what was expected and the fix."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._constructor = YamlLoader("")

    def compose(self, text: str) -> Node | None:
        loader = YamlLoader(text)
        try:
            return loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark is not None else 1
            what = "; ".join(x for x in (e.context, e.problem) if x)
            raise self.error(line, f"not valid YAML ({what}); expected a YAML mapping; check "
                                   f"the indentation, colons and quotes on this line or the "
                                   f"one before") from None
        except yaml.YAMLError as e:
            raise self.error(1, f"not valid YAML ({e}); expected a YAML mapping; "
                                f"{EXAMPLE}") from None
        finally:
            loader.dispose()

    def error(self, at: Node | int, message: str) -> UserError:
        line = at if isinstance(at, int) else at.start_mark.line + 1
        return UserError(f"{self.path}:{line}: {message}")

    def value(self, node: Node) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            raise self.error(node, f"cannot read this value ({e}); expected plain YAML "
                                   f"scalars, lists and mappings; remove the tag") from None

    def arrived(self, node: Node) -> str:
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        value = self.value(node)
        return f"{type(value).__name__} {value!r}" if value is not None else "nothing (null)"

    def mapping(self, node: Node, what: str, allowed: Sequence[str] | None = None) -> Fields:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what}: expected a mapping (key: value lines), got "
                                   f"{self.arrived(node)}; {EXAMPLE}")
        fields: Fields = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or not key:
                raise self.error(key_node, f"{what}: expected a text key, got "
                                           f"{self.arrived(key_node)}; write the key as text")
            if key in fields:
                first = fields[key][0].start_mark.line + 1
                hint = ("; to search a key under several conditions write params as a list "
                        "(see the docstring of spaces/_loader.py)" if what == "params" else
                        "; keep one of them")
                raise self.error(key_node, f"{what}: {key!r} appears twice (first at line "
                                           f"{first}){hint}")
            if allowed is not None and key not in allowed:
                raise self.error(key_node, f"{what}: unknown field {key!r}; expected one of "
                                           f"{', '.join(allowed)}; fix the spelling or remove it")
            fields[key] = (key_node, value_node)
        return fields

    def text(self, node: Node, what: str, *, empty_ok: bool = False) -> str:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or (not empty_ok and not value.strip()):
            raise self.error(node, f"{what}: expected {'text' if empty_ok else 'non-empty text'}"
                                   f", got {self.arrived(node)}; write it as a quoted string")
        return " ".join(value.split())

    def scalar(self, node: Node, what: str) -> Any:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(node, yaml.ScalarNode) or not isinstance(
            value, (str, int, float, bool, type(None))
        ):
            raise self.error(node, f"{what}: expected a single value (text, number, true/false "
                                   f"or null), got {self.arrived(node)}; write one value "
                                   f"(quote dates and the like)")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(node, f"{what}: expected a finite number, got {value!r}; "
                                   f"write a finite number")
        return value

    def key(self, node: Node, what: str) -> str:
        key = self.value(node)
        if not KEY_PATTERN.fullmatch(key):
            raise self.error(node, f"{what}: {key!r} is not a valid config key; expected a name "
                                   f"without spaces, brackets or '/' (Ray nests keys at '/'), "
                                   f"such as 'loss.margin'; rename it")
        return str(key)
