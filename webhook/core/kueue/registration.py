"""The MutatingWebhookConfiguration ``rules`` that register the webhook for the kinds table.

Derived from :data:`webhook.core.kueue.kinds.KINDS` (SPEC §4), for the chart, the generator and the e2e
suite's registration; the table itself says where each kind keeps its fields.
"""

from __future__ import annotations

from typing import Any

from webhook.core.kueue.kinds import KINDS

__all__ = ["webhook_rules"]


def webhook_rules(operations: tuple[str, ...] = ("CREATE", "UPDATE")) -> list[dict[str, Any]]:
    """MutatingWebhookConfiguration ``rules`` covering exactly the kinds of :data:`KINDS`.

    One rule per API group and version, its resources sorted; namespaced scope. Versions are
    listed explicitly (SPEC §4): another version of a group is not sent to the webhook, except a
    row's ``unmanaged_versions``, which are sent to be refused. A built-in kind's ``status``
    subresource is listed too: the API server keeps metadata changes made through it.
    """
    by_group: dict[tuple[str, str], set[str]] = {}
    for row in KINDS:
        for version in (*row.versions, *(unmanaged for unmanaged, _ in row.unmanaged_versions)):
            by_group.setdefault((row.group, version), set()).add(row.resource)
            if row.built_in:  # their status strategies keep metadata changes: the labels can change there
                by_group[(row.group, version)].add(f"{row.resource}/status")
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": list(operations),
            "resources": sorted(resources),
            "scope": "Namespaced",
        }
        for (group, version), resources in sorted(by_group.items())
    ]
