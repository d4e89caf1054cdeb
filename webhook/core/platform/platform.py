"""The platform file: one declarative YAML document that describes teams, quotas and placement.

Shape (SPEC §2)::

    apiVersion: kueue-governor.io/v1alpha1
    kind: Platform
    naming: hyperpod | default
    topologies:  [{name, levels: [broadest … narrowest]}]
    flavors:     [{name, nodeLabels, nodeTaints, tolerations, topologyName, nodeResources}]
    cohorts:     [{name, parentName, fairSharing: {weight}}]
    priorities:  [{name, value, description, podPriorityClass}]
    teams:       [{name, namespaces | namespaceSelector, cohort, quotas, preemption,
                   fairSharing, queueingStrategy, policy}]

Every model forbids unknown fields, so a typo fails with its exact path. Field names follow
Kueue's API (``nominalQuota``, ``borrowingLimit``, ``lendingLimit``, ``topologyName``,
``nodeLabels``) so that a platform engineer reads them as Kueue objects.

Cross-references (a team naming a flavor that does not exist, …) are checked by
:func:`check_platform`, which reports every problem with its field path; :func:`load_platform`
runs both steps and raises :class:`PlatformError`.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from webhook.core.objects.paths import field_path
from webhook.core.objects.quantity import parse_quantity
from webhook.core.platform.checks import PlatformError, check_platform
from webhook.core.platform.fields import API_VERSION, HOSTNAME_LABEL, Enforcement, TopologyMode, dns1123_label_error
from webhook.core.platform.models import (
    CohortSpec,
    FlavorQuota,
    FlavorSpec,
    LabelSelector,
    NodeSelectorRequirement,
    Platform,
    PriorityRule,
    PrioritySpec,
    QueueRule,
    ResourceQuota,
    TeamPolicy,
    TeamSpec,
    TopologyRule,
    TopologySpec,
)
from webhook.core.platform.problems import Problem
from webhook.core.platform.yamlload import YamlLimitError, limited, yaml_error_line

__all__ = [
    "API_VERSION",
    "HOSTNAME_LABEL",
    "CohortSpec",
    "Enforcement",
    "FlavorQuota",
    "FlavorSpec",
    "LabelSelector",
    "NodeSelectorRequirement",
    "Platform",
    "PlatformError",
    "PriorityRule",
    "PrioritySpec",
    "Problem",
    "QueueRule",
    "ResourceQuota",
    "TeamPolicy",
    "TeamSpec",
    "TopologyMode",
    "TopologyRule",
    "TopologySpec",
    "check_platform",
    "dns1123_label_error",
    "load_platform",
    "parse_platform",
    "parse_platform_text",
    "platform_json_schema",
]


def parse_platform(data: Any, source: str = "<platform>") -> Platform:
    """Validate a decoded platform document (dict) and its references.

    Raises:
        PlatformError: schema errors (with pydantic's field paths) or reference problems.
    """
    if not isinstance(data, dict):
        raise PlatformError(source, [Problem(path="", message="the platform file must be a YAML mapping")])
    try:
        platform = Platform.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(path=field_path(err["loc"]), message=err["msg"].removeprefix("Value error, "))
            for err in exc.errors()
        ]
        raise PlatformError(source, problems) from None
    errors = [p for p in check_platform(platform) if p.severity == "error"]
    if errors:
        raise PlatformError(source, errors)
    return platform


_LOADER = limited(yaml.SafeLoader)


def _safe_load(text: str, source: str) -> Any:
    """``yaml.safe_load`` whose error marks name ``source`` (not ``<unicode string>``) and keep the
    line snippet that PyYAML shows for text."""
    loader = _LOADER(text)
    loader.name = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_platform(path: str | Path) -> Platform:
    """Read and validate a platform YAML file.

    Every file-level message names the file, since some callers print only the problems.

    Raises:
        PlatformError: unreadable file, YAML syntax error, schema or reference problems.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PlatformError(source, [Problem(path="", message=f"cannot read {source}: {reason}")]) from None
    except UnicodeDecodeError as exc:
        raise PlatformError(
            source, [Problem(path="", message=f"{source} is not UTF-8 text: {exc.reason} at byte {exc.start}")]
        ) from None
    return parse_platform_text(text, source)


def parse_platform_text(text: str, source: str = "<platform>") -> Platform:
    """Parse and validate the YAML text of a platform file (e.g. the ``platform.yaml`` of the
    chart's policy ConfigMap, SPEC §8 "the values carry the platform file itself"); ``source``
    names it in messages.

    Raises:
        PlatformError: YAML syntax error, a document over the reader's limits, schema or reference
            problems.
    """
    try:
        data = _safe_load(text, source)
    except YamlLimitError as exc:
        raise PlatformError(source, [Problem(path="", message=f"{source} is not usable YAML: {exc}")]) from None
    except yaml.YAMLError as exc:
        raise PlatformError(source, [Problem(path="", message=f"not valid YAML: {yaml_error_line(exc)}")]) from None
    except ValueError as exc:
        raise PlatformError(source, [Problem(path="", message=f"not valid YAML: {exc}")]) from None
    except RecursionError:  # none known under MAX_YAML_DEPTH; still a problem, never a traceback
        raise PlatformError(source, [Problem(path="", message="not valid YAML: nested too deeply")]) from None
    return parse_platform(data, source)


def platform_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the platform file, for editors."""
    schema = Platform.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kueue-governor platform file"
    return schema


def quota_total(team: TeamSpec, flavor: str, resource: str) -> Decimal:
    """Sum of a team's ``nominalQuota`` for one flavor and resource (GPUs, CPUs, bytes)."""
    return sum(
        (
            parse_quantity(q.resources[resource].nominalQuota)
            for q in team.quotas
            if q.flavor == flavor and resource in q.resources
        ),
        Decimal(0),
    )
