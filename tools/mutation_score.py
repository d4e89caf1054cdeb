"""The mutation score of the last ``make mutate`` run, per module of webhook/core.

Usage: ``python tools/mutation_score.py MODULE...`` with modules as paths under webhook/core without
``.py`` (``platform/resolve``, ``plan/rules/queue``). It reads mutmut's verdicts from
``mutants/webhook/core/MODULE.py.meta`` and the mutants judged equivalent from
``tools/equivalent-mutants.txt`` (one mutant name a line, then its reason; ``#`` starts a comment).

A mutant is *caught* when a test failed (killed) or ran out of time (the mutation made a loop endless).
The score is caught / (mutants checked - equivalent survivors). Survivors not listed as equivalent are
printed with the command that shows their diff. Exit status 1 when there is nothing to score.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parent.parent
META = ROOT / "mutants" / "webhook" / "core"
EQUIVALENT = ROOT / "tools" / "equivalent-mutants.txt"


def equivalents(path: Path | None = None) -> dict[str, str]:
    """Mutant name -> the reason it behaves like the original, from ``path`` (default: EQUIVALENT)."""
    found: dict[str, str] = {}
    for line in (path or EQUIVALENT).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        found[name] = reason.strip()
    return found


def verdicts(module: str) -> dict[str, str]:
    """Mutant name -> mutmut's status ("killed", "survived", "timeout", "not checked", ...)."""
    meta = META / f"{module}.py.meta"
    if not meta.is_file():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def main(modules: list[str]) -> int:
    known = equivalents()
    rows: list[tuple[str, Counter[str], int]] = []
    survivors: list[str] = []
    stale: list[str] = []
    for module in modules:
        found = verdicts(module)
        counts: Counter[str] = Counter(found.values())
        equivalent = 0
        for name, status in sorted(found.items()):
            if status in ("survived", "no tests"):
                if name in known:
                    equivalent += 1
                else:
                    survivors.append(name)
            elif name in known and status in ("killed", "timeout"):
                stale.append(name)
        rows.append((module, counts, equivalent))
    checked_any = any(sum(c.values()) - c["not checked"] for _, c, _ in rows)
    if not checked_any:
        print("mutate-score: no verdicts under mutants/ for these modules; run `make mutate` first", file=sys.stderr)
        return 1

    header = f"{'module':<22}{'mutants':>8}{'killed':>8}{'timeout':>8}{'survived':>9}{'equiv.':>7}"
    print(header + f"{'no tests':>9}{'unrun':>7}{'score':>8}")
    totals: Counter[str] = Counter()
    total_equivalent = 0
    for module, counts, equivalent in rows:
        totals.update(counts)
        total_equivalent += equivalent
        print(_row(module, counts, equivalent))
    print(_row("all", totals, total_equivalent))
    if survivors:
        print(f"\n{len(survivors)} survivors not listed in {EQUIVALENT.relative_to(ROOT)} (see one: mutmut show NAME):")
        for name in survivors:
            print(f"  {name}")
    if stale:
        print("\nlisted as equivalent but killed now (remove them from the list):")
        for name in stale:
            print(f"  {name}")
    return 0


def _row(module: str, counts: Counter[str], equivalent: int) -> str:
    total = sum(counts.values())
    caught = counts["killed"] + counts["timeout"]
    scored = total - counts["not checked"] - equivalent
    # Rounded down, so a single survivor never shows as 100.0%.
    score = f"{math.floor(1000 * caught / scored) / 10:.1f}%" if scored else "-"
    survived = counts["survived"]
    return (
        f"{module:<22}{total:>8}{counts['killed']:>8}{counts['timeout']:>8}{survived:>9}{equivalent:>7}"
        f"{counts['no tests']:>9}{counts['not checked']:>7}{score:>8}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
