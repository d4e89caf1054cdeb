"""The plan of one request: its changes, denials and warnings, and the draft they are made on.

:class:`Draft` is a copy-on-write working copy of the object: a rule edits it through
:meth:`Draft.set` / :meth:`Draft.append`, which record each edit as a :class:`Change` (an ``add``
of something missing, or a ``replace`` of a present value). :class:`Plan` gathers the changes and
what to tell the user. Paths are tuples; :mod:`webhook.core.plan.patch` turns them into RFC 6902
operations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.kueue.wellformed import Problem
from webhook.core.objects.paths import Key, child, lookup
from webhook.core.platform.platform import Enforcement
from webhook.core.platform.policy import TeamPolicyCompiled, ValueRule

__all__ = ["Change", "Draft", "Plan", "Rule", "Shape", "check_value", "json_value", "malformed", "string_map"]

Rule = Literal["queue", "kueuePriority", "podPriority", "topology", "nodeAffinity", "suspend"]


@dataclass(frozen=True)
class Change:
    """One edit: ``op`` at ``path`` (keys from the object root) with ``value``, and why; a
    ``remove`` (of a value an admission policy filled in, :mod:`webhook.core.plan.policy_fill`) has
    no value."""

    op: Literal["add", "replace", "remove"]
    path: tuple[Key, ...]
    value: Any
    rule: Rule
    reason: str


@dataclass
class Plan:
    """The outcome for one request.

    ``denials`` non-empty → the request is refused with those messages; ``warnings`` go back as
    AdmissionReview warnings; ``skipped`` says why no rule applied (untouched object).
    """

    changes: list[Change] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: str = ""
    invalid: bool = False
    #: The rule of each denial and warning, in order (bounded values, for metrics).
    denied_rules: list[str] = field(default_factory=list)
    warned_rules: list[str] = field(default_factory=list)
    #: How choices were made (topology mode auto's sizes and levels), for ``kgov mutate --explain``.
    notes: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials

    def report(self, enforcement: Enforcement, rule: str, message: str) -> None:
        """Record ``rule: message`` as a denial (``enforce``) or a warning (``warn``); nothing for
        ``default``, which only fills in what is missing."""
        if enforcement == "enforce":
            self.denials.append(f"{rule}: {message}")
            self.denied_rules.append(rule)
        elif enforcement == "warn":
            self.warnings.append(f"{rule}: {message}")
            self.warned_rules.append(rule)


class Draft:
    """A working copy of the object plus the changes that produced it.

    Copy-on-write: the draft shares the caller's maps and lists until a change touches them; then
    each container on the changed path is copied once (the request object is never modified).
    """

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.doc: dict[str, Any] = dict(obj)
        self._owned: set[int] = {id(self.doc)}
        self.changes: list[Change] = []
        #: A podset's base path → the draft's own map there (:meth:`set_below`), and the longest
        #: such path: an edit at a path no longer than that may replace one (then forgotten).
        self._bases: dict[tuple[Key, ...], dict[str, Any]] = {}
        self._base_len = -1

    def get(self, path: tuple[Key, ...]) -> Any:
        return lookup(self.doc, path)

    def set(self, path: tuple[Key, ...], value: Any, rule: Rule, reason: str) -> None:
        """Set ``path`` to ``value``, adding missing maps as one whole map (never replacing one).

        Raises:
            Shape: a value on the way is not the map (or list) the next key needs.
        """
        self._set_from(self.doc, path, 0, value, rule, reason)

    def set_below(
        self,
        base: tuple[Key, ...],
        suffix: tuple[Key, ...],
        value: Any,
        rule: Rule,
        reason: str,
        copied: bool = False,
    ) -> None:
        """:meth:`set` of ``(*base, *suffix)``, where ``base`` is a podset's base (a map the
        rules edit below, never replace): the draft's own copy of that map is found once per draft
        and each later edit below it walks ``suffix`` only. ``copied``: ``value`` is a copy the
        caller made for this change alone (shared with nothing), kept as it is, not cloned again.

        Raises:
            Shape: as :meth:`set`.
        """
        node = self._bases.get(base)
        if node is None:
            node = self._own_base(base)
            if node is None:  # missing or of another type on the way: the walk from the root says which
                self._set_from(self.doc, (*base, *suffix), 0, value, rule, reason, copied)
                return
            self._bases[base] = node
            self._base_len = max(self._base_len, len(base))
        self._set_from(node, (*base, *suffix), len(base), value, rule, reason, copied)

    def _own_base(self, base: tuple[Key, ...]) -> dict[str, Any] | None:
        """The draft's own map at ``base``, each container on the way copied into the draft; None
        when a step is missing or is not the exact JSON container the next key needs."""
        node: Any = self.doc
        owned = self._owned
        for index, key in enumerate(base):
            found: Any = node.get(key) if type(node) is dict else child(node, key)
            kind = type(found)
            wanted = dict if index + 1 == len(base) or type(base[index + 1]) is str else list
            if kind is not wanted:
                return None
            if id(found) not in owned:
                found = dict(found) if kind is dict else list(found)
                owned.add(id(found))
                node[key] = found
            node = found
        return node if type(node) is dict else None

    def _set_from(
        self, node: Any, path: tuple[Key, ...], start: int, value: Any, rule: Rule, reason: str, copied: bool = False
    ) -> None:
        """:meth:`set` of ``path`` from ``node``, the draft's own container at ``path[:start]``;
        ``copied``: as :meth:`set_below`."""
        # One walk down the path: each container on it is checked, then copied into the draft
        # (copy-on-write) so that the edit below lands in the draft's own copy. A Shape error may
        # leave copies made on the way: they equal what they replace.
        owned = self._owned
        last = len(path) - 1
        for index in range(start, last):
            key = path[index]
            found = node.get(key) if type(node) is dict else child(node, key)
            if found is None:
                nested: Any = value if copied else _clone(value)  # the maps made around it are new
                for inner in reversed(path[index + 1 :]):
                    nested = {inner: nested}
                self._put(node, "add", path[: index + 1], nested, rule, reason, cloned=True)
                return
            kind = type(found)
            # The exact JSON types first (no path slice unless a check must run the slow way).
            if kind is dict:
                if type(path[index + 1]) is not str:
                    expect_container(path[: index + 1], found, path[index + 1])
            elif kind is not list or type(path[index + 1]) is not int:
                expect_container(path[: index + 1], found, path[index + 1])
            if id(found) not in owned:
                found = dict(found) if isinstance(found, dict) else list(found)
                owned.add(id(found))
                node[key] = found
            node = found
        existed = type(node) is dict and node.get(path[-1]) is not None
        self._put(node, "replace" if existed else "add", path, value, rule, reason, copied)

    def append(self, list_path: tuple[Key, ...], value: Any, rule: Rule, reason: str) -> None:
        """Append to the list at ``list_path`` (which must exist)."""
        items = self.get(list_path)
        assert isinstance(items, list)
        self._record("add", (*list_path, len(items)), value, rule, reason)

    def _own(self, path: tuple[Key, ...]) -> Any:
        """The container at ``path``, with it and every container above it copied into the draft."""
        node: Any = self.doc
        for key in path:
            found = child(node, key)
            if id(found) not in self._owned:
                found = dict(found) if isinstance(found, dict) else list(found)
                self._owned.add(id(found))
                node[key] = found
            node = found
        return node

    def _record(
        self, op: Literal["add", "replace"], path: tuple[Key, ...], value: Any, rule: Rule, reason: str
    ) -> None:
        self._put(self._own(path[:-1]), op, path, value, rule, reason)

    def _put(
        self,
        parent: Any,
        op: Literal["add", "replace"],
        path: tuple[Key, ...],
        value: Any,
        rule: Rule,
        reason: str,
        cloned: bool = False,
    ) -> None:
        """Edit ``parent`` (the draft's own container at ``path[:-1]``) and record the change;
        ``cloned``: ``value`` is already the change's own copy."""
        key = path[-1]
        if self._base_len >= len(path) or (self._bases and type(parent) is not dict):
            self._forget(path, type(parent) is not dict)
        # The change gets its own copy of the value: another change made from the same policy
        # value must not share it (nor make YAML anchors in `kgov mutate`). The draft holds the
        # same copy; a later edit below it copies what it changes first (copy-on-write: only
        # containers in ``_owned`` are edited in place), so the change never sees that edit.
        copy = value if cloned else _clone(value)
        if type(parent) is not dict and isinstance(parent, list):
            assert isinstance(key, int)
            parent.insert(key, copy)
        else:
            parent[key] = copy
        self.changes.append(Change(op, path, copy, rule, reason))

    def _forget(self, path: tuple[Key, ...], into_list: bool) -> None:
        """Drop the remembered bases an edit at ``path`` may replace or move: those at or below
        ``path`` and, for an insert into a list (``into_list``), every one below that list."""
        items = path[:-1]
        for base in list(self._bases):
            if base[: len(path)] == path or (into_list and base[: len(items)] == items):
                del self._bases[base]
        self._base_len = max(map(len, self._bases), default=-1)


def expect_container(path: tuple[Key, ...], found: Any, next_key: Key) -> None:
    """Raise :class:`Shape` unless ``found`` can take ``next_key`` (a map for names, a list for indexes)."""
    if isinstance(next_key, int):
        if not isinstance(found, list):
            raise Shape(path, found, "array")
    elif not isinstance(found, dict):
        raise Shape(path, found)


def _clone(value: Any) -> Any:
    """A deep copy of a JSON value (maps, lists, scalars); much cheaper than ``copy.deepcopy``."""
    kind = type(value)
    if kind is str or kind is bool or kind is int:  # the common values: nothing to copy
        return value
    # A string item is kept as it is without a call (label values, expression values).
    if kind is dict or isinstance(value, dict):
        return {k: v if type(v) is str else _clone(v) for k, v in value.items()}
    if kind is list or isinstance(value, list):
        return [v if type(v) is str else _clone(v) for v in value]
    return value


class Shape(Exception):
    """A value of the wrong JSON type where the plan must write (``expected``: object or array)."""

    def __init__(self, path: tuple[Key, ...], found: Any, expected: str = "object") -> None:
        self.path = path
        self.found = found
        self.expected = expected


def check_value(
    plan: Plan,
    rule_name: str,
    rule: ValueRule,
    value: Any,
    where: str,
    team: TeamPolicyCompiled,
    what: str,
    consequence: str = "",
) -> None:
    """Report ``value`` under ``rule``'s enforcement when it is outside the allowed set;
    ``consequence`` (what happens to the object if it stays) is added to the message."""
    if rule.allowed is None or value in rule.allowed:
        return
    allowed = ", ".join(rule.allowed) or "none"
    message = f"{what} {json_value(value)} ({where}) is not allowed for team {team.team!r}; allowed: {allowed}"
    if consequence:
        message += f"; {consequence}"
    plan.report(rule.enforcement, rule_name, message)


def json_value(value: Any) -> str:
    """``true``/``false``/``null`` and quoted strings, as a user wrote them in YAML or JSON."""
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value)


def string_map(draft: Draft, path: tuple[Key, ...]) -> dict[str, Any]:
    """The map at ``path`` in the draft ({} when absent).

    Raises:
        Shape: the value there is not a map.
    """
    value = draft.get(path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Shape(path, value)
    return value


def malformed(*problems: Shape | Problem) -> Plan:
    """The plan for an object with values Kueue or the rules cannot read: a value of the wrong
    JSON type where the rules read or write (:class:`Shape`), a malformed count or quantity
    (:class:`~webhook.core.kueue.wellformed.Problem`). Denied whatever the enforcement (``invalid``:
    HTTP 422), one message per value, each naming its path."""
    plan = Plan(invalid=True)
    for problem in problems:
        if isinstance(problem, Shape):
            problem = Problem(problem.path, problem.found, f"an {problem.expected}")
        plan.report("enforce", "malformed object", problem.message())
    return plan
