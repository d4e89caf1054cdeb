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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PREFERRED, REQUIRED, SLICE_REQUIRED, SLICE_SIZE, PodSet, kueue_view
from webhook.core.objects.paths import Key, lookup
from webhook.core.plan.rules.topology import TAS_ANNOTATIONS

__all__ = [
    "WIDENED",
    "Placement",
    "Step",
    "governor_step",
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
        if not tail:
            return cls("required" if mode == "required" else "preferred", level)
        name, _, value = tail.partition(":")
        size, _, at = value.partition("@")
        count = _count(size)
        if mode != "required" or name != "slices" or not at or count is None:
            return None
        return cls("required", level, (count, at))


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
    if keys != {REQUIRED, SLICE_REQUIRED, SLICE_SIZE} or _count(annotations[SLICE_SIZE]) is None:
        return None
    return Placement("required", annotations[REQUIRED], (int(annotations[SLICE_SIZE]), annotations[SLICE_REQUIRED]))


def _count(text: str) -> int | None:
    """A positive count written in decimal digits (``"4"``), else None."""
    return int(text) if text.isascii() and text.isdigit() and int(text) >= 1 else None


def next_placement(current: Placement, start: Placement, levels: Sequence[str]) -> Placement | None:
    """The next step of the ladder from ``current`` for a podset that started at ``start``, over
    the Topology's ``levels`` (broadest first): its slices dropped at the same level, else one
    level broader, else ``preferred`` at ``start``'s level (without slices); None at its end
    (``preferred``), or when a level is not one of ``levels``."""
    if current.mode != "required" or current.level not in levels or start.level not in levels:
        return None
    if current.slices is not None:
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
        if not isinstance(entry, Mapping):
            return None
        podsets, at, reason = entry.get("podsets"), entry.get("at"), entry.get("reason", "")
        before, after = Placement.parse(entry.get("from")), Placement.parse(entry.get("to"))
        if not isinstance(podsets, list) or not podsets or not all(isinstance(p, str) for p in podsets):
            return None
        if before is None or after is None or not isinstance(at, str) or seconds_of(at) is None:
            return None
        return cls(tuple(podsets), before, after, at, reason if isinstance(reason, str) else "")


def history_path(row: WorkloadKind) -> tuple[Key, ...]:
    """Where the history goes: the annotations next to the kind's labels."""
    return (*row.labels_at, "annotations", WIDENED)


def read_history(obj: Mapping[str, Any], row: WorkloadKind) -> list[Step] | None:
    """The steps recorded on ``obj`` ([] when there is no history); None when the annotation is
    there but is not a history this module wrote (not JSON, not a list of steps, too long)."""
    value = lookup(obj, history_path(row))
    if value is None:
        return []
    try:
        entries = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not isinstance(entries, list) or len(entries) > MOST_STEPS:
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


def seconds_of(text: Any) -> float | None:
    """An RFC 3339 time (as Kubernetes writes ``creationTimestamp``) as seconds since the epoch;
    None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def _tas(podset: PodSet) -> dict[str, Any]:
    return {key: value for key, value in podset.annotations.items() if key in TAS_ANNOTATIONS}


def governor_step(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, levels: Sequence[str]
) -> tuple[str, ...]:
    """The podsets an UPDATE widens as one governor step, or () when it is not exactly that.

    One step: the history of ``new`` is the history of ``old`` plus one entry; each podset that
    entry names goes from the entry's ``from`` (its placement in ``old``) to its ``to`` (its
    placement in ``new``: :func:`placement_of` its TAS annotations), which is the ladder's next step from
    ``from`` (:func:`next_placement`, over the team Topology's ``levels``, from where the podset
    started). Who may send it (the governor's user) is the caller's check."""
    before, after = read_history(old, row), read_history(new, row)
    if before is None or after is None or len(after) != len(before) + 1 or after[: len(before)] != before:
        return ()
    step = after[-1]
    new_podsets = {p.name: p for p in kueue_view(new, row).podsets if p.present}
    old_podsets = {p.name: p for p in kueue_view(old, row).podsets if p.present}
    for name in step.podsets:
        now, then = new_podsets.get(name), old_podsets.get(name)
        if now is None or then is None or now.path != then.path:
            return ()
        if placement_of(_tas(then)) != step.before or placement_of(_tas(now)) != step.after:
            return ()
        if next_placement(step.before, start_of(name, step.before, before), levels) != step.after:
            return ()
    return step.podsets
