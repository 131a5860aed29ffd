"""The one place the logger, tracer and metrics are created (Powertools)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

logger = Logger()
tracer = Tracer()
metrics = Metrics()


def count(name: str, dimension: str, value: str) -> None:
    """One EMF count with its own dimension (Metrics' shared dimensions would apply to every metric)."""
    with single_metric(name=name, unit=MetricUnit.Count, value=1) as metric:
        metric.add_dimension(name=dimension, value=value)
