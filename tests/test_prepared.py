"""Per-team values prepared once per policy (webhook.core.platform.prepared): right values, right team."""

from __future__ import annotations

import gc
from decimal import Decimal

from support import platform_with, teams_from

from webhook.core.plan.rules.pod_priority import pod_rule
from webhook.core.platform import prepared as prepared_module
from webhook.core.platform.prepared import prepared

POLICY = {
    "queue": {},
    "podPriority": {"default": "low", "allowed": ["low", "high"]},
    "nodeAffinity": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]},
        {"key": "example.com/spare", "operator": "DoesNotExist"},
    ],
}


def test_values() -> None:
    team = teams_from(platform_with(POLICY)).policies.teams[0]
    values = prepared(team)
    assert values.affinity == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]},
        {"key": "example.com/spare", "operator": "DoesNotExist"},
    ]
    assert values.affinity_exact[1] == {"key": "example.com/spare", "operator": "DoesNotExist", "values": []}
    assert values.quota_limits == {"nvidia.com/gpu": Decimal(64)}
    assert prepared(team) is values  # once per team


def test_a_copy_of_a_team_is_prepared_anew() -> None:
    """The cache follows the team object, not its contents: a changed copy gets its own values."""
    team = teams_from(platform_with(POLICY)).policies.teams[0]
    assert team.podPriority is not None
    assert pod_rule(team.podPriority, team).allowed == ["low", "high"]
    narrower = team.podPriority.model_copy(update={"allowed": ["low"]})
    copy = team.model_copy(update={"podPriority": narrower, "quotaLimits": {"nvidia.com/gpu": "8"}})
    assert copy.podPriority is not None
    assert pod_rule(copy.podPriority, copy).allowed == ["low"]
    assert prepared(copy).quota_limits == {"nvidia.com/gpu": Decimal(8)}
    assert prepared(team).quota_limits == {"nvidia.com/gpu": Decimal(64)}


def test_an_entry_goes_with_its_team() -> None:
    team = teams_from(platform_with(POLICY)).policies.teams[0]
    prepared(team)
    key = id(team)
    assert key in prepared_module._CACHE
    del team
    gc.collect()
    assert key not in prepared_module._CACHE
