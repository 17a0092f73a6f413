"""Monitoring: per-iteration metrics and their sinks, reward-drift detection, alerts, reports.

Public API: :func:`iteration_metrics`, :func:`make_sinks`, :class:`DriftMonitor`,
:class:`AlertRules`, :func:`write_report`.
"""

from sparring.monitor.alerts import Alert, AlertRules
from sparring.monitor.drift import DriftMonitor, DriftResult
from sparring.monitor.metrics import MetricsSink, iteration_metrics, make_sinks
from sparring.monitor.report import write_report

__all__ = [
    "Alert",
    "AlertRules",
    "DriftMonitor",
    "DriftResult",
    "MetricsSink",
    "iteration_metrics",
    "make_sinks",
    "write_report",
]
