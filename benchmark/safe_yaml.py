"""The one YAML reader: run configs, ``--set`` values and suite files all come through here.

PyYAML's ``safe_load`` runs no code, but it still trusts the shape of the text: an alias
bomb ("billion laughs") expands into a value that every later walk (merging, validation,
an error message's repr) visits in exponential time; a repeated mapping key is silently
merged (the last one wins); a UTF-16 file dies with ``UnicodeDecodeError``; a deeply nested
document ends in ``RecursionError``. This loader refuses each of them with one
:class:`~benchmark.errors.ConfigError` line that names the file and line:

* the text is at most :data:`MAX_BYTES` long, and a file must be UTF-8 (a UTF-8 BOM is fine);
* a mapping key may appear once per mapping (``<<`` merge keys excepted);
* anchors and aliases stay usable (the suites share row orders with them), but the value
  they expand to is capped: at most :data:`MAX_ALIASES` aliases, :data:`MAX_NODES` nodes
  and :data:`MAX_DEPTH` levels counted *after* expansion, and an alias inside its own
  anchor (a recursive value) is refused. The checks walk the composed node graph (each
  node once) before any Python value is built, so they cost time linear in the text;
* no message quotes a whole value: :func:`short_repr` and :func:`clip` cut it to one line
  of about 80 characters;
* the nesting is counted on the parser's flat event stream before anything recursive runs,
  so a deep document is refused on any PyYAML build rather than overflowing a stack.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from benchmark.errors import ConfigError

MAX_BYTES = 256 << 10    # 256 KiB: the largest suite is ~10 KiB
MAX_ALIASES = 1_000      # alias uses in one document
MAX_NODES = 100_000      # nodes of the expanded document
MAX_DEPTH = 64           # nesting levels of the expanded document
SHOWN_CHARS = 80         # how much of a value an error message quotes

MERGE_TAG = "tag:yaml.org,2002:merge"
_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xfe\xff", "UTF-16"),
         (b"\xff\xfe", "UTF-16"))


class YamlSyntaxError(ConfigError):
    """The text is not well-formed YAML (``--set`` then takes the value as a plain string)."""


# --------------------------------------------------------------------------- messages


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = SHOWN_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 8
_REPR.maxlevel = 3


def short_repr(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A repr for an error message: bounded work whatever the value's size, one line, <= ``limit``."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


# --------------------------------------------------------------------------- loader


class _Refused(Exception):
    """A document this loader will not build (the message says why); carries the line."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def _line(node: Any) -> int | None:
    mark = getattr(node, "start_mark", None)
    return None if mark is None else mark.line + 1


# libyaml composes ~10x faster than the pure-Python parser and caps nesting itself; both
# build the same node graph, which the checks below read before anything is constructed.
_BASE: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """Safe loader (libyaml when present); the caps are checked on its node graph."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_nesting(text: str) -> None:
    """Refuse text whose collections nest deeper than MAX_DEPTH before it is composed.

    Composing recurses once per level (Python frames in PyYAML, C frames in its libyaml
    binding); libyaml caps the nesting at 1,000 itself, but not every build does, and on a
    GPU machine's PyYAML a 100,000-level document crashed the process instead of raising.
    The parser's event stream is flat (a state machine), so its depth is counted here first.
    """
    events = _BASE(text)
    try:
        depth = 0
        while events.check_event():
            event = events.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    raise _Refused(f"nests deeper than {MAX_DEPTH} levels", mark.line + 1 if mark else None)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        events.dispose()


def check_expansion(root: Node) -> None:
    """Refuse a node graph with more than MAX_ALIASES aliases, or whose expansion is recursive,
    larger than MAX_NODES or deeper than MAX_DEPTH. Each distinct node is visited once (sizes
    are memoized), so an alias bomb is measured in time linear in its text, not its expansion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()
    edges = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            edges += len(kids)
            if edges - len(size) > MAX_ALIASES:  # a tree has one edge per node; each alias adds one
                raise _Refused(f"more than {MAX_ALIASES} aliases", _line(node))
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            active.discard(key)
            if size[key] > MAX_NODES:
                raise _Refused(f"holds more than {MAX_NODES} values (each alias counted in full)", _line(node))
            if depth[key] > MAX_DEPTH:
                raise _Refused(f"nests deeper than {MAX_DEPTH} levels (each alias counted in full)", _line(node))
            continue
        if key in size:
            continue
        if key in active:
            raise _Refused("an alias refers to the value that contains it (a recursive value)", _line(node))
        active.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def check_duplicate_keys(loader: yaml.SafeLoader, root: Node) -> None:
    """Refuse a mapping that repeats a key (PyYAML keeps the last silently)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        stack.extend(_children(node))
        if not isinstance(node, MappingNode):
            continue
        first: dict[Any, int | None] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue  # a complex key is refused by the constructor (unhashable)
            key = loader.construct_object(key_node)
            try:
                if key in first:
                    raise _Refused(f"duplicate key {short_repr(key)} (first at line {first[key]})",
                                   _line(key_node))
                first[key] = _line(key_node)
            except TypeError:  # unhashable: the constructor says so
                continue


def _syntax_message(where: str, e: yaml.YAMLError) -> str:
    """PyYAML's problem (and its context, e.g. a duplicate anchor's first use) on one line."""
    mark = getattr(e, "problem_mark", None)
    at = f" line {mark.line + 1}" if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e)
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        where_ctx = f" (line {context_mark.line + 1})" if context_mark is not None else ""
        problem = f"{context}{where_ctx}, {problem}"
    return f"malformed YAML in {where}{at}: {clip(problem, 160)}"


def loads(text: str, where: str) -> Any:
    """Parse one YAML document (None when empty) under every cap of this module.

    ``where`` names the source in messages (a path, ``--set key``). Raises
    :class:`YamlSyntaxError` for text that is not YAML, ConfigError for a document refused here.
    """
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_BYTES} bytes; a config or suite is a few KiB")
    loader = None
    try:
        check_nesting(text)
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        check_duplicate_keys(loader, node)
        return loader.construct_document(node)
    except _Refused as e:
        at = f" line {e.line}" if e.line is not None else ""
        raise ConfigError(f"{where}{at}: {e}") from None
    except yaml.YAMLError as e:
        raise YamlSyntaxError(_syntax_message(where, e)) from None
    except (ValueError, OverflowError, TypeError, RecursionError) as e:  # e.g. a date 2020-13-45
        raise YamlSyntaxError(f"malformed YAML in {where}: {clip(str(e), 160)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: str | Path) -> str:
    """A file's text: at most MAX_BYTES, UTF-8 (a leading UTF-8 BOM is dropped)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read {p}: {clip(e.strerror or str(e))}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{p}: larger than {MAX_BYTES} bytes; a config or suite is a few KiB")
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise ConfigError(f"{p}: must be UTF-8 text, found a {name} byte-order mark; save it as UTF-8")
    if b"\x00" in data:
        raise ConfigError(f"{p}: must be UTF-8 text, found NUL bytes (UTF-16 or a binary file?)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = f"byte 0x{data[e.start]:02x} at offset {e.start}"
        raise ConfigError(f"{p}: must be UTF-8 text ({bad} is not UTF-8)") from None


def load_file(path: str | Path) -> Any:
    """Read and parse a YAML file under every cap of this module."""
    return loads(read_text(path), str(path))
