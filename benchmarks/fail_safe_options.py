"""What each configuration of ``bench_fail_safe.py`` does for a create, beside what it costs: the
features of SPEC §3 (queue label, Kueue priority, topology, node affinity, never stranded, pod
priority) and §8b (the MutatingAdmissionPolicies fill what CEL states exactly: the queue label,
the team's default Kueue priority, a fixed topology level on a kind with a single static pod
template; ``webhook/generate/admission_policies.py``).

Imported by ``bench_fail_safe.py`` as a plain module and by the unit tests as
``benchmarks.fail_safe_options``; data and formatting only.
"""

from __future__ import annotations

#: The configurations, in the benchmark's order.
OPTIONS = ("none", "policies", "no-op", "canned", "kgov", "kgov+policies")

#: feature → the cell of each option (in :data:`OPTIONS` order).
FEATURES: dict[str, tuple[str, ...]] = {
    "queue label": ("no", "yes", "no", "copied", "yes", "yes"),
    "Kueue priority": ("no", "default only", "no", "copied", "yes", "yes"),
    "fixed topology level": ("no", "one-template kinds", "no", "copied", "yes", "yes"),
    "auto topology": ("no", "no", "no", "no", "yes", "yes"),
    "node affinity": ("no", "no", "no", "no", "yes", "yes"),
    "never-stranded checks": ("no", "no", "no", "no", "yes", "yes"),
    "pod priority": ("no", "no", "no", "no", "yes", "yes"),
    "while the webhook is down": ("-", "fills the 3 above", "-", "-", "refused", "policies fill"),
}

NOTES = (
    "default only: the team's default when the Job names none; an allowed value is not checked.",
    "one-template kinds: a fixed mode (required/preferred at a level, unconstrained) on a kind with a single "
    "static pod template and no TAS annotation of the user's; not auto, not slices.",
    "copied: kgov's patch for the benchmark's one Job, given unchanged to every Job (a cost floor, not an option).",
    "refused: failurePolicy Fail refuses the create; with Ignore the ValidatingAdmissionPolicy refuses a Job "
    "without its team's queue label (failSafe.mode validate).",
)


def feature_table() -> str:
    """The table as plain text: a header of :data:`OPTIONS`, a row per feature, then the notes;
    every column padded to its widest cell."""
    rows = [("feature", *OPTIONS), *((name, *cells) for name, cells in FEATURES.items())]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [
        "   " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join([*lines, *(f"   {note}" for note in NOTES)])
