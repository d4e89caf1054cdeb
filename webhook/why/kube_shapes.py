"""Models of the Kubernetes objects and fields (``core/v1``, ``metav1``) that ``kgov why`` reads.

Each model lists only the fields read (pydantic, strict types, other fields ignored); every field
is optional and null counts as absent, as for Kubernetes' ``omitempty`` fields, except
``metadata.name`` of an object joined by name (:class:`Object`). Sources: ``k8s.io/api/core/v1``
``PodSpec`` (the fields Kueue counts: containers' resources, overhead, pod-level resources, node
selector, required node affinity, tolerations), ``Node``, ``Pod``, ``ConfigMap``;
``k8s.io/apimachinery`` ``ObjectMeta``, ``OwnerReference``, ``Condition`` and ``resource.Quantity``.
Used through :func:`webhook.why.shapes.check_snapshot`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainValidator, StrictBool, StrictInt, StrictStr
from pydantic_core import PydanticCustomError

from webhook.core.kueue.wellformed import INT32_MAX
from webhook.core.objects.quantity import QuantityError, parse_quantity

__all__ = [
    "AnyObject",
    "Bool",
    "Condition",
    "ConfigMap",
    "Count",
    "Int",
    "Node",
    "NonNegative",
    "Object",
    "Pod",
    "PodTemplate",
    "Quantities",
    "Quantity",
    "Shape",
    "Str",
    "StrMap",
    "Toleration",
    "expected",
]


def expected(phrase: str) -> PydanticCustomError:
    """The error of a value that is not ``phrase`` (with its article: ``"a Kubernetes quantity"``)."""
    return PydanticCustomError("kgov_expected", "{expected}", {"expected": phrase})


def _quantity(value: Any) -> Any:
    """``resource.Quantity``: a JSON string or number of the quantity grammar."""
    try:
        if isinstance(value, str | int | float):
            parse_quantity(value)
            return value
    except QuantityError:
        pass
    raise expected("a Kubernetes quantity (e.g. 8, 500m, 64Gi)")


Quantity = Annotated[Any, PlainValidator(_quantity)]


def _int32(low: int) -> AfterValidator:
    """A Kubernetes ``int32`` of at least ``low`` (``+kubebuilder:validation:Minimum``)."""

    def check(value: int) -> int:
        if not low <= value <= INT32_MAX:
            raise expected(f"an integer from {low} to {INT32_MAX}")
        return value

    return AfterValidator(check)


Str = StrictStr | None
#: An ``int32`` (a priority), and a count (``int32``, ``Minimum=0``: pods, domains, workloads).
Int = Annotated[StrictInt, _int32(-INT32_MAX - 1)] | None
NonNegative = Annotated[StrictInt, _int32(0)]
Count = NonNegative | None
Bool = StrictBool | None
StrMap = dict[str, StrictStr] | None
Quantities = dict[str, Quantity] | None


class Shape(BaseModel):
    """A JSON object of a known shape: strict types, unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class OwnerReference(Shape):
    apiVersion: Str = None
    kind: Str = None
    name: Str = None
    uid: Str = None
    controller: Bool = None


class Metadata(Shape):
    """``metav1.ObjectMeta``: the fields read (``managedFields`` is read defensively)."""

    name: StrictStr
    namespace: Str = None
    uid: Str = None
    creationTimestamp: Str = None
    labels: StrMap = None
    annotations: StrMap = None
    ownerReferences: list[OwnerReference] | None = None
    managedFields: list[dict[str, Any]] | None = None


class Condition(Shape):
    type: Str = None
    status: Str = None
    reason: Str = None
    message: Str = None
    lastTransitionTime: Str = None


class AnyObject(Shape):
    """A workload object of any kind (or one between it and its Workloads): what the joins read
    (``kind``, ``metadata``); its spec is checked by the webhook's own review of it."""

    kind: Str = None
    apiVersion: Str = None
    metadata: Metadata | None = None


class Object(AnyObject):
    """An object the report joins by name: its ``metadata.name`` must be there."""

    metadata: Metadata


# core/v1 PodSpec, as far as requests, node selection and tolerations go.
class Resources(Shape):
    requests: Quantities = None
    limits: Quantities = None


class Container(Shape):
    name: Str = None
    resources: Resources | None = None
    restartPolicy: Str = None


class Toleration(Shape):
    key: Str = None
    operator: Str = None
    value: Str = None
    effect: Str = None
    tolerationSeconds: StrictInt | None = None  # int64


class Requirement(Shape):
    key: Str = None
    operator: Str = None
    values: list[StrictStr] | None = None


class Term(Shape):
    matchExpressions: list[Requirement] | None = None
    matchFields: list[Requirement] | None = None


class NodeSelector(Shape):
    nodeSelectorTerms: list[Term] | None = None


class NodeAffinity(Shape):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(Shape):
    nodeAffinity: NodeAffinity | None = None


class PodSpec(Shape):
    nodeName: Str = None
    containers: list[Container] | None = None
    initContainers: list[Container] | None = None
    resources: Resources | None = None
    overhead: Quantities = None
    nodeSelector: StrMap = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None


class PodTemplate(Shape):
    spec: PodSpec | None = None


class PodStatus(Shape):
    phase: Str = None


class Pod(Object):
    spec: PodSpec | None = None
    status: PodStatus | None = None


class Taint(Shape):
    key: Str = None
    value: Str = None
    effect: Str = None


class NodeSpec(Shape):
    unschedulable: Bool = None
    taints: list[Taint] | None = None


class NodeStatus(Shape):
    allocatable: Quantities = None
    capacity: Quantities = None
    conditions: list[Condition] | None = None


class Node(Object):
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class ConfigMap(Object):
    """The webhook's ``kgov-policy`` ConfigMap (``data`` values are strings)."""

    data: StrMap = None
