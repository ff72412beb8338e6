"""`txnadmin metrics`: read the batched writers' metrics and recommend thresholds."""

from .analyze import ComponentReport, MetricsError, analyze_registry, analyze_text, fetch

__all__ = ["ComponentReport", "MetricsError", "analyze_registry", "analyze_text", "fetch"]
