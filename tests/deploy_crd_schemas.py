"""JSON schemas for the custom resources the manifests use, which kubernetes-validate does not ship.

Written from the fields documented for KEDA 2.x (ScaledObject, TriggerAuthentication) and the Prometheus
Operator's monitoring.coreos.com/v1 API (ServiceMonitor, PodMonitor), and strict like kubernetes-validate's
`--strict` schemas: an unknown or misspelt field fails. They cover the fields an installation is likely to
use, not every field the operators accept; a field added to a manifest that is missing here fails the test
until the schema learns it from the operator's documentation.
"""

from __future__ import annotations

from typing import Any

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_METADATA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
        "namespace": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
    "required": ["name"],
    "additionalProperties": False,
}

_LABEL_SELECTOR = _closed(
    {
        "matchLabels": _STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": _closed(
                {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
                ("key", "operator"),
            ),
        },
    }
)

_NAMESPACE_SELECTOR = _closed(
    {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}
)

_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}

_RELABEL_CONFIG = _closed(
    {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                "lowercase", "uppercase", "keepequal", "dropequal",
            ]
        },
    }
)  # fmt: skip

_ENDPOINT_COMMON: dict[str, Any] = {
    "port": {"type": "string"},
    "targetPort": {"type": ["integer", "string"]},
    "path": {"type": "string", "pattern": "^/"},
    "scheme": {"enum": ["http", "https"]},
    "interval": _DURATION,
    "scrapeTimeout": _DURATION,
    "honorLabels": {"type": "boolean"},
    "honorTimestamps": {"type": "boolean"},
    "relabelings": {"type": "array", "items": _RELABEL_CONFIG},
    "metricRelabelings": {"type": "array", "items": _RELABEL_CONFIG},
    "params": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
}

_MONITOR_COMMON: dict[str, Any] = {
    "selector": _LABEL_SELECTOR,
    "namespaceSelector": _NAMESPACE_SELECTOR,
    "jobLabel": {"type": "string"},
    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
    "sampleLimit": {"type": "integer", "minimum": 0},
}

SERVICE_MONITOR = _closed(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": _closed(
            {
                **_MONITOR_COMMON,
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "endpoints": {"type": "array", "minItems": 1, "items": _closed(_ENDPOINT_COMMON)},
            },
            ("selector", "endpoints"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

POD_MONITOR = _closed(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": _METADATA,
        "spec": _closed(
            {
                **_MONITOR_COMMON,
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": _closed({**_ENDPOINT_COMMON, "portNumber": {"type": "integer"}}),
                },
            },
            ("selector", "podMetricsEndpoints"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

# The HPA behavior inside a ScaledObject is Kubernetes' own type; the test validates it with
# kubernetes-validate by placing it in a HorizontalPodAutoscaler, so here it is only an object.
SCALED_OBJECT = _closed(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _METADATA,
        "spec": _closed(
            {
                "scaleTargetRef": _closed(
                    {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                    ("name",),
                ),
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": _closed(
                    {"failureThreshold": {"type": "integer", "minimum": 1}, "replicas": {"type": "integer"}},
                    ("failureThreshold", "replicas"),
                ),
                "advanced": _closed(
                    {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": _closed(
                            {"name": {"type": "string"}, "behavior": {"type": "object"}}
                        ),
                    }
                ),
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": _closed(
                        {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            "metadata": _STRING_MAP,
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": _closed(
                                {
                                    "name": {"type": "string", "minLength": 1},
                                    "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]},
                                },
                                ("name",),
                            ),
                        },
                        ("type", "metadata"),
                    ),
                },
            },
            ("scaleTargetRef", "triggers"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

TRIGGER_AUTHENTICATION = _closed(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": _METADATA,
        "spec": _closed(
            {
                "secretTargetRef": {
                    "type": "array",
                    "items": _closed(
                        {"parameter": {"type": "string"}, "name": {"type": "string"}, "key": {"type": "string"}},
                        ("parameter", "name", "key"),
                    ),
                },
                "env": {
                    "type": "array",
                    "items": _closed(
                        {
                            "parameter": {"type": "string"},
                            "name": {"type": "string"},
                            "containerName": {"type": "string"},
                        },
                        ("parameter", "name"),
                    ),
                },
                "podIdentity": _closed({"provider": {"type": "string"}, "identityId": {"type": "string"}}),
            }
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PodMonitor"): POD_MONITOR,
}
