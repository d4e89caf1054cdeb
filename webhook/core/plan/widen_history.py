"""The widening ladder and its history on the workload object (a topology policy's ``patience``).

A podset the governor may widen carries ``podset-required-topology`` or
``podset-preferred-topology`` alone, or ``podset-required-topology`` with slices
(``podset-slice-required-topology`` and ``podset-slice-size``, as mode ``auto`` writes for a
podset larger than a domain of the next level down); no ``unconstrained``, no multi-layer slices:
its :class:`Placement`. The ladder (:func:`next_placement`) first drops the slices (the pods stay
in one domain of the same level, on any of its nodes: the job keeps its smallest feasible domain,
and a domain with room scattered over its racks now holds it), then goes from ``required`` at a
level to ``required`` one level broader, up to the Topology's broadest level, and from there to
``preferred`` at the level the podset started from; ``preferred`` is its end. It never narrows.

Each step is recorded in the annotation :data:`WIDENED` next to the object's labels (the
``metadata`` that carries the queue label): a JSON list of steps, oldest first, each
``{"podsets": [...], "from": "required:<level>", "to": "required:<level>" | "preferred:<level>",
"at": "<RFC 3339>", "reason": "<Kueue's message>"}``; a placement with slices reads
``required:<level>;slices:<size>@<slice level>`` (no label key holds ``;`` or ``@``). The
webhook's UPDATE rules accept a change of TAS annotations from the governor's own user only when
it is one step, recorded as such (:func:`governor_step`).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PREFERRED, REQUIRED, SLICE_REQUIRED, SLICE_SIZE, PodSet, kueue_view
from webhook.core.objects.integers import decimal_int
from webhook.core.objects.paths import Key, lookup
from webhook.core.plan.draft import Plan
from webhook.core.plan.rules.topology import TAS_ANNOTATIONS

__all__ = [
    "WIDENED",
    "Placement",
    "Step",
    "check_step",
    "governor_step",
    "governor_widening",
    "history_path",
    "next_placement",
    "placement_of",
    "read_history",
    "rfc3339",
    "seconds_of",
    "start_of",
]

#: The history annotation (on the workload object, next to its queue label).
WIDENED = "kueue-governor.io/widened"
#: The most steps a history may hold: a podset takes at most 16 (a Topology has at most 16 levels,
#: SPEC §2: 15 broader ones and preferred); a longer list is none the governor wrote.
MOST_STEPS = 64
_STEP_KEYS = frozenset({"podsets", "from", "to", "at", "reason"})


@dataclass(frozen=True)
class Placement:
    """One podset's TAS placement: ``mode`` ``required`` or ``preferred`` at ``level`` (a label
    key); ``slices``: (slice size in pods, slice level), with ``required`` only."""

    mode: Literal["required", "preferred"]
    level: str
    slices: tuple[int, str] | None = None

    @property
    def key(self) -> str:
        """The TAS annotation that writes its level."""
        return REQUIRED if self.mode == "required" else PREFERRED

    def annotations(self) -> dict[str, str]:
        """The TAS annotations that write it, and nothing else."""
        out = {self.key: self.level}
        if self.slices is not None:
            out.update({SLICE_SIZE: str(self.slices[0]), SLICE_REQUIRED: self.slices[1]})
        return out

    def describe(self) -> str:
        """In words: ``required at <level>`` (`` in slices of <size> pods at <slice level>``)."""
        sliced = f" in slices of {self.slices[0]} pods at {self.slices[1]}" if self.slices is not None else ""
        return f"{self.mode} at {self.level}{sliced}"

    def text(self) -> str:
        """``required:<level>`` (``;slices:<size>@<slice level>``), as the history writes it."""
        sliced = f";slices:{self.slices[0]}@{self.slices[1]}" if self.slices is not None else ""
        return f"{self.mode}:{self.level}{sliced}"

    @classmethod
    def parse(cls, text: Any) -> Placement | None:
        """The placement a history entry names (None: not one)."""
        if not isinstance(text, str):
            return None
        head, _, tail = text.partition(";")
        mode, _, level = head.partition(":")
        if mode not in ("required", "preferred") or not level:
            return None
        slices = None
        if tail:
            name, _, value = tail.partition(":")
            size, _, at = value.partition("@")
            count = _count(size)
            if mode != "required" or name != "slices" or not at or count is None:
                return None
            slices = (count, at)
        placement = cls("required" if mode == "required" else "preferred", level, slices)
        return placement if placement.text() == text else None  # one spelling: no "04", no trailing ";"


def placement_of(annotations: Mapping[str, Any]) -> Placement | None:
    """The placement of a podset whose TAS annotations are one required or preferred level (a
    string) alone, or a required level with both slice annotations (a size of at least 1 in
    decimal digits, a level); None for any other set (unconstrained, none, two levels, a slice
    annotation alone, multi-layer slices)."""
    keys = {key for key in annotations if key in TAS_ANNOTATIONS}
    values = [annotations[key] for key in keys]
    if not all(isinstance(value, str) and value for value in values):
        return None
    if keys == {REQUIRED} or keys == {PREFERRED}:
        (key,) = keys
        return Placement("required" if key == REQUIRED else "preferred", annotations[key])
    count = _count(annotations[SLICE_SIZE]) if keys == {REQUIRED, SLICE_REQUIRED, SLICE_SIZE} else None
    if count is None:
        return None
    return Placement("required", annotations[REQUIRED], (count, annotations[SLICE_REQUIRED]))


def _count(text: str) -> int | None:
    """A slice size as the policy writes it: a positive int32 (Kueue's) in decimal digits, no sign
    or leading zero (``"4"``); else None."""
    number = decimal_int(text, signs="")
    return number if number is not None and 1 <= number < 2**31 and str(number) == text else None


def next_placement(current: Placement, start: Placement, levels: Sequence[str]) -> Placement | None:
    """The next step of the ladder from ``current`` for a podset that started at ``start``, over
    the Topology's ``levels`` (broadest first): its slices dropped at the same level, else one
    level broader, else ``preferred`` at ``start``'s level (without slices); None at its end
    (``preferred``), or when a level is not one of ``levels``."""
    if current.mode != "required" or current.level not in levels or start.level not in levels:
        return None
    if current.slices is not None:
        sliced = current.slices[1]
        if sliced not in levels or levels.index(sliced) <= levels.index(current.level):
            return None
        return Placement("required", current.level)
    index = list(levels).index(current.level)
    if index > 0:
        return Placement("required", levels[index - 1])
    return Placement("preferred", start.level)


@dataclass(frozen=True)
class Step:
    """One widening: ``podsets`` (Kueue's names) went from ``before`` to ``after`` at ``at``
    (RFC 3339, UTC) because of ``reason`` (Kueue's message)."""

    podsets: tuple[str, ...]
    before: Placement
    after: Placement
    at: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "podsets": list(self.podsets),
            "from": self.before.text(),
            "to": self.after.text(),
            "at": self.at,
            "reason": self.reason,
        }

    @classmethod
    def parse(cls, entry: Any) -> Step | None:
        """The step an entry records; None unless it has exactly the keys :meth:`as_json` writes
        (``reason`` may be left out), distinct podset names, placements in their one spelling
        and an RFC 3339 ``at``."""
        if not isinstance(entry, Mapping) or not set(entry) <= _STEP_KEYS:
            return None
        podsets, at, reason = entry.get("podsets"), entry.get("at"), entry.get("reason", "")
        before, after = Placement.parse(entry.get("from")), Placement.parse(entry.get("to"))
        if not isinstance(podsets, list) or not podsets or not all(isinstance(p, str) for p in podsets):
            return None
        if len(set(podsets)) != len(podsets) or not isinstance(reason, str):
            return None
        if before is None or after is None or not isinstance(at, str) or seconds_of(at) is None:
            return None
        return cls(tuple(podsets), before, after, at, reason)


def history_path(row: WorkloadKind) -> tuple[Key, ...]:
    """Where the history goes: the annotations next to the kind's labels."""
    return (*row.labels_at, "annotations", WIDENED)


def _entries(obj: Mapping[str, Any], row: WorkloadKind) -> list[Any] | None:
    """The history annotation's JSON list as it is ([] when there is none); None when it is no
    string, no JSON (nested too deep for the parser included) or no list of at most
    :data:`MOST_STEPS` entries."""
    value = lookup(obj, history_path(row))
    if value is None:
        return []
    try:
        entries = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):
        return None
    return entries if isinstance(entries, list) and len(entries) <= MOST_STEPS else None


def read_history(obj: Mapping[str, Any], row: WorkloadKind) -> list[Step] | None:
    """The steps recorded on ``obj`` ([] when there is no history); None when the annotation is
    there but is not a history this module wrote (:func:`_entries`, :meth:`Step.parse`)."""
    return _steps(_entries(obj, row))


def _steps(entries: list[Any] | None) -> list[Step] | None:
    """The steps of a history's entries (:func:`_entries`); None when any is no step."""
    if entries is None:
        return None
    steps = [Step.parse(entry) for entry in entries]
    return None if any(step is None for step in steps) else [s for s in steps if s is not None]


def history_value(steps: Sequence[Step]) -> str:
    """The annotation's value for ``steps`` (compact JSON)."""
    return json.dumps([step.as_json() for step in steps], separators=(",", ":"))


def start_of(podset: str, current: Placement, history: Sequence[Step]) -> Placement:
    """Where ``podset`` started: the ``before`` of its first recorded step, else ``current``."""
    for step in history:
        if podset in step.podsets:
            return step.before
    return current


def last_step_of(podset: str, history: Sequence[Step]) -> Step | None:
    """The latest recorded step of ``podset`` (None: never widened)."""
    for step in reversed(history):
        if podset in step.podsets:
            return step
    return None


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 in UTC, to the second (``2026-12-05T03:30:00Z``)."""
    return datetime.datetime.fromtimestamp(int(seconds), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: RFC 3339's ``date-time`` (section 5.6; ``T`` and ``Z`` in either case), as Kubernetes writes
#: ``Time`` (``2026-12-05T03:30:00Z``) and ``MicroTime`` (six fractional digits).
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def seconds_of(text: Any) -> float | None:
    """An RFC 3339 date-time (as Kubernetes writes ``creationTimestamp``) as seconds since the
    epoch; None when it is not one (ISO 8601's other forms included: no week dates, no basic
    format, no space for ``T``)."""
    if not isinstance(text, str) or _RFC3339.fullmatch(text) is None:
        return None
    try:
        return datetime.datetime.fromisoformat(text.upper().replace("Z", "+00:00")).timestamp()
    except ValueError:  # month 13, day 32 ...
        return None


def _tas(podset: PodSet) -> dict[str, Any]:
    return {key: value for key, value in podset.annotations.items() if key in TAS_ANNOTATIONS}


def governor_step(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, levels: Sequence[str]
) -> tuple[str, ...]:
    """The podsets an UPDATE widens as one governor step, or () when it is not exactly that
    (:func:`check_step`)."""
    return check_step(new, old, row, levels)[0]


def governor_widening(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, levels: Sequence[str], plan: Plan
) -> tuple[str, ...]:
    """:func:`governor_step` of an UPDATE the governor's own user sends; when the update changes
    the history annotation but is not one step, a warning on ``plan`` says why, and its TAS
    annotations are then checked as anyone's."""
    podsets, why = check_step(new, old, row, levels)
    if not podsets and lookup(new, history_path(row)) != lookup(old, history_path(row)):
        plan.report("warn", "topology", f"not taken as the governor's widening: {why}; checked as any user's change")
    return podsets


def check_step(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, levels: Sequence[str]
) -> tuple[tuple[str, ...], str]:
    """(the podsets an UPDATE widens as one governor step, "") or ((), why it is not one step).

    One step: the object is suspended before and after; the history of ``new`` is the history of
    ``old``, entry for entry as written, plus one entry; that entry names every podset of each
    podset group it names (Kueue places a group as one); each podset it names goes from the
    entry's ``from`` (its placement in ``old``) to its ``to`` (its placement in ``new``:
    :func:`placement_of` its TAS annotations), which is the ladder's next step from ``from``
    (:func:`next_placement`, over the team Topology's ``levels``, from where the podset started).
    Who may send it (the governor's user) is the caller's check."""
    if row.suspend is None or lookup(old, row.suspend) is not True or lookup(new, row.suspend) is not True:
        return (), "the governor widens suspended workloads only"
    raw_before, raw_after = _entries(old, row), _entries(new, row)
    before, after = _steps(raw_before), _steps(raw_after)
    if raw_before is None or raw_after is None or before is None or after is None:
        return (), f"its {WIDENED} annotation is not a history the governor writes"
    if len(after) != len(before) + 1 or raw_after[: len(raw_before)] != raw_before:
        return (), f"its {WIDENED} annotation does not add exactly one entry to the stored history"
    step = after[-1]
    new_podsets = {p.name: p for p in kueue_view(new, row).podsets if p.present}
    old_podsets = {p.name: p for p in kueue_view(old, row).podsets if p.present}
    for name in step.podsets:
        now, then = new_podsets.get(name), old_podsets.get(name)
        if now is None or then is None or now.path != then.path:
            return (), f"the step names podset {name!r}, which the workload does not have"
        group = {p.name for p in old_podsets.values() if then.group is not None and p.group == then.group}
        if not group <= set(step.podsets):
            return (), f"the step leaves out podsets of group {then.group!r} (Kueue places a group as one)"
        if placement_of(_tas(then)) != step.before or placement_of(_tas(now)) != step.after:
            return (), f"podset {name!r}'s TAS annotations are not the step's from and to"
        if next_placement(step.before, start_of(name, step.before, before), levels) != step.after:
            return (
                (),
                f"podset {name!r}: {step.after.text()} is not the next step of the ladder from {step.before.text()}",
            )
    return step.podsets, ""
