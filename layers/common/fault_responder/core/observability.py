"""The one place the logger, tracer and metrics are created (Powertools).

The template sets POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE; the defaults here keep the
names the same when the package is imported without them (tests, tools), since Powertools reads them once.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from fault_responder.core import logsafety  # noqa: F401 - imported for its log filters (secrets never logged)
from fault_responder.core.tracing import make_tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "gpu-fault-responder"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "GpuFaultResponder"

logger = Logger(service=SERVICE)
tracer: Tracer = make_tracer(SERVICE, os.environ)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)


def count(name: str, dimension: str, value: str) -> None:
    """One EMF count with its own dimension (Metrics' shared dimensions would apply to every metric)."""
    with single_metric(name=name, unit=MetricUnit.Count, value=1, namespace=NAMESPACE) as metric:
        metric.add_dimension(name=dimension, value=value)


def measure(name: str, dimension: str, value: str, amount: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """One EMF value (a gauge: an age, a size, a duration) with its own dimension, like `count`."""
    with single_metric(name=name, unit=unit, value=amount, namespace=NAMESPACE) as metric:
        metric.add_dimension(name=dimension, value=value)
