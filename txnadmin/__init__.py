"""txnadmin: the operator's toolkit for Apache Pulsar transactions."""

__version__ = "0.1.0"
__all__ = ["__version__"]
