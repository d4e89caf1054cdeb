"""Request bodies as strict JSON, with a precise reason for every body that is not.

:func:`decode_json` is RFC 8259 JSON as the API server writes it (Go's ``encoding/json``): UTF-8
without a byte order mark, no ``NaN``/``Infinity``, strings of Unicode text (a lone UTF-16
surrogate escape such as ``"\\ud800"`` is none; Go writes U+FFFD instead), integers of at most
4,000 digits, nesting at most :data:`MAX_DEPTH` levels deep. A duplicated key keeps its last value,
as Go's decoder does. Anything else raises :class:`BodyError` saying what is wrong and where (byte,
line and column, and the path inside the document where there is one).

The common case costs one ``json.loads``: the depth is checked only when the body holds more than
:data:`MAX_DEPTH` brackets, surrogates only when it holds a ``\\ud8``–``\\udf`` escape.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from operator import sub
from typing import Any

__all__ = ["JSON_TYPES", "MAX_DEPTH", "BodyError", "decode_json", "dotted_path", "json_type", "nesting_error"]

#: Deepest nesting of arrays and objects decoded, the document itself being level 1. Kubernetes
#: objects are about 20 levels deep (an AppWrapper's JobSet's pod affinity about 30); the limit
#: keeps every walk of a decoded value well inside Python's stack.
MAX_DEPTH = 512
_DIGITS_LIMIT = 4000
_INF = float("inf")
_BOMS = {
    b"\xef\xbb\xbf": "a UTF-8 byte order mark (EF BB BF)",
    b"\xff\xfe\x00\x00": "UTF-32 (byte order mark FF FE 00 00)",
    b"\x00\x00\xfe\xff": "UTF-32 (byte order mark 00 00 FE FF)",
    b"\xff\xfe": "UTF-16 (byte order mark FF FE)",
    b"\xfe\xff": "UTF-16 (byte order mark FE FF)",
}
#: A JSON string, a key (a string and its colon), or a bracket or comma: enough to follow nesting.
_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:)?|[\[\]{},]', re.DOTALL)
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]")
_SURROGATE_TEXT = re.compile(r"[\ud800-\udfff]|\\[uU][dD][89a-fA-F]")
_ESCAPE = re.compile(r"\\.", re.DOTALL)
#: Per byte, 1 + its change to the nesting depth: ``[``/``{`` 2, ``]``/``}`` 0, anything else 1.
_STEPS = bytes(2 if b in b"[{" else 0 if b in b"]}" else 1 for b in range(256))
_CHUNK = 65536
#: Characters before a too-deep place up to which its path is also given (a walk of the tokens).
_PATH_SCAN_LIMIT = 256 * 1024
_INVALID = "body is not valid JSON: "
_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
#: What an unfinished literal, number or escape looks like at the very end of a text.
_UNFINISHED = re.compile(r"(t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|-|[0-9]*\.|[0-9.]*[eE][+-]?)\Z")


class BodyError(ValueError):
    """The body is not JSON we decode; the message says what is wrong and where."""


class _Refused(ValueError):
    """A literal the decoder hooks refuse; ``literal`` is found again to say where it is."""

    def __init__(self, literal: str, message: str) -> None:
        super().__init__(message)
        self.literal = literal


def _no_constant(name: str) -> Any:
    raise _Refused(name, f"{name} is not a JSON value")


def _float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):
        raise _Refused(text, f"the number {text[:32]} is out of range of a 64-bit float")
    return value


def _integer(digits: str) -> int:
    if len(digits) > _DIGITS_LIMIT:  # below Python's own conversion limit, whose message names Python internals
        raise _Refused(digits, f"a number of {len(digits)} digits is no Kubernetes value")
    return int(digits)


#: One decoder for every body (``json.loads`` with hooks would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_int=_integer, parse_float=_float)


def _located(text: str, exc: _Refused) -> str:
    """The refusal with the line and column of the literal's first occurrence as a JSON value."""
    found = re.search(r"(?:^|(?<=[\s:,\[]))" + re.escape(exc.literal) + r"(?=[\s,\]}]|\Z)", text)
    return f"{exc} (at {_where(text, found.start())})" if found else str(exc)


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line} column {column}"


def _printable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes (so it can be encoded)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def dotted_path(path: list[str | int]) -> str:
    """``a.b[0]``, a run of one step repeated written once with its count (``a[0] (× 900)``)."""
    steps = [f"[{key}]" if isinstance(key, int) else f".{_printable(key)}" for key in path]
    out = ""
    index = 0
    while index < len(steps):
        run = 1
        while index + run < len(steps) and steps[index + run] == steps[index]:
            run += 1
        out += steps[index] * run if run < 3 else f"{steps[index]} (× {run})"
        index += run
    out = out.removeprefix(".")
    return out if len(out) <= 200 else f"{out[:120]}…{out[-60:]}"


def _first_over(steps: bytes, room: int) -> int | None:
    """The first position where the running depth change of ``steps`` (:data:`_STEPS` values)
    exceeds ``room``, or None. Chunk by chunk, each chunk's peak by C-level running sums."""
    base = 0
    for start in range(0, len(steps), _CHUNK):
        chunk = steps[start : start + _CHUNK]
        changes = list(map(sub, accumulate(chunk), range(1, len(chunk) + 1)))  # depth change after each byte
        if base + max(changes) > room:
            return start + next(i for i, change in enumerate(changes) if base + change > room)
        base += changes[-1]
    return None


def _too_deep_at(text: str, limit: int) -> int | None:
    """The offset of the first ``[`` or ``{`` outside strings that opens level ``limit + 1``.

    String contents are skipped by splitting at quotes (escapes first made two plain characters),
    and only a piece that can reach the limit is walked, by running sums computed chunk by chunk:
    on 8 MiB of ``[],[],…`` it takes about a second, less than decoding such a body does (the walk
    of tokens that names the path would take ten)."""
    masked = _ESCAPE.sub("__", text)
    depth = offset = 0
    for index, piece in enumerate(masked.split('"')):
        if index % 2 == 0:  # outside strings
            opens = piece.count("[") + piece.count("{")
            if depth + opens > limit:
                found = _first_over(piece.encode("utf-8", "surrogatepass").translate(_STEPS), limit - depth)
                if found is not None:  # a byte position in the piece; its brackets are ASCII
                    prefix = piece.encode("utf-8", "surrogatepass")[:found].decode("utf-8", "surrogatepass")
                    return offset + len(prefix)
            depth += opens - piece.count("]") - piece.count("}")
        offset += len(piece) + 1
    return None


def nesting_error(text: str, limit: int = MAX_DEPTH) -> str | None:
    """Where ``text`` (JSON) first nests deeper than ``limit``: ``nested more than N levels deep
    (at line L column C) within a.b[0]``, or None when it never does. The path is given when the
    place is in the first :data:`_PATH_SCAN_LIMIT` characters (it takes a walk of the tokens)."""
    offset = _too_deep_at(text, limit)
    if offset is None:
        return None
    where = f"nested more than {limit} levels deep (at {_where(text, offset)})"
    if offset > _PATH_SCAN_LIMIT:
        return where
    stack: list[list[Any]] = []  # per open container: [is_map, key or index]
    for match in _TOKEN.finditer(text, 0, offset):
        token = match.group(0)
        if token[0] == '"':
            if match.group(2) and stack and stack[-1][0]:
                try:
                    stack[-1][1] = json.loads(f'"{match.group(1)}"')
                except ValueError:
                    stack[-1][1] = match.group(1)
        elif token in "[{":
            stack.append([token == "{", None if token == "{" else 0])
        elif token in "]}":
            if stack:
                stack.pop()
        elif stack and not stack[-1][0]:  # a comma in an array: the next index
            stack[-1][1] += 1
    inside = dotted_path([frame[1] for frame in stack if frame[1] is not None])
    return f"{where} within {inside}" if inside else where


def _brackets(raw: bytes | str) -> int:
    """How many ``[`` and ``{`` a body holds (in strings too): no more levels than that."""
    if isinstance(raw, bytes):
        return raw.count(b"[") + raw.count(b"{")
    return raw.count("[") + raw.count("{")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether a decoded value nests deeper than ``limit`` (without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if type(node) is dict else node
        stack.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return False


def _lone_surrogate(value: Any) -> tuple[list[str | int], str] | None:
    """(path, string) of the first string or key holding an unpaired UTF-16 surrogate."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, node = stack.pop()
        if type(node) is str:
            if any("\ud800" <= char <= "\udfff" for char in node):
                return path, node
        elif type(node) is dict:
            for key, child in node.items():
                if any("\ud800" <= char <= "\udfff" for char in key):
                    return [*path, key], key
                stack.append(([*path, key], child))
        elif type(node) is list:
            stack.extend(([*path, index], child) for index, child in enumerate(node))
    return None


def _ends_early(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether a decode error is the end of the text coming too soon (a cut body)."""
    rest = text[exc.pos :].rstrip()
    if exc.msg.startswith("Unterminated string"):
        return True
    if exc.msg.startswith("Invalid \\uXXXX escape") or exc.msg.startswith("Invalid \\escape"):
        return len(text) - exc.pos < 6 and '"' not in text[exc.pos :]
    return not rest or bool(_UNFINISHED.fullmatch(rest))


def decode_json(raw: bytes | str) -> Any:
    """Decode a body as strict JSON (see the module's docstring).

    Raises:
        BodyError: empty, not UTF-8 (UTF-16/32 and byte order marks named), cut short, not JSON, a
            NaN/Infinity constant, an integer of over 4,000 digits, a lone surrogate, or nested
            deeper than :data:`MAX_DEPTH` levels.
    """
    if isinstance(raw, bytes):
        for bom, name in _BOMS.items():
            if raw.startswith(bom):
                raise BodyError(f"body starts with {name}; it must be UTF-8 JSON without a byte order mark")
        if b"\x00" in raw[:4]:  # RFC 4627 §3: how UTF-16 and UTF-32 JSON without a mark begin
            raise BodyError(
                f"body looks like UTF-16 or UTF-32 (a NUL byte at byte {raw.index(0)}); it must be UTF-8 JSON"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":
                raise BodyError(f"{_INVALID}it ends early, after {len(raw)} bytes, inside a UTF-8 character") from None
            raise BodyError(f"{_INVALID}not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = raw
    if not text.strip():
        raise BodyError("body is empty" if not text else "body is only white space")
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        if _ends_early(text, exc):
            size = len(raw) if isinstance(raw, bytes) else len(text)
            raise BodyError(f"{_INVALID}it ends early, after {size} bytes ({exc})") from None
        raise BodyError(f"{_INVALID}{exc}") from None
    except RecursionError:
        raise BodyError(f"body is {nesting_error(text) or _TOO_DEEP}") from None
    except _Refused as exc:
        raise BodyError(f"{_INVALID}{_located(text, exc)}") from None
    except ValueError as exc:  # none known; still a 400 with the decoder's words, never a 500
        raise BodyError(f"{_INVALID}{exc}") from None
    if len(raw) > MAX_DEPTH and _brackets(raw) > MAX_DEPTH and _depth_over(value, MAX_DEPTH):
        raise BodyError(f"body is {nesting_error(text) or _TOO_DEEP}")
    if _SURROGATE.search(raw) if isinstance(raw, bytes) else _SURROGATE_TEXT.search(text):
        found = _lone_surrogate(value)
        if found is not None:
            path, string = found
            escaped = _printable(string[:64])
            where = f"at {dotted_path(path)}" if path else "as the whole document"
            raise BodyError(
                f"body holds an unpaired UTF-16 surrogate ({escaped}) {where}, which is not Unicode text "
                "(the API server sends U+FFFD in its place)"
            )
    return value


#: The JSON name of each Python type a decoded document holds.
JSON_TYPES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``string``, …)."""
    return JSON_TYPES.get(type(value), type(value).__name__)
