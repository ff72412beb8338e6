"""The one reader of Prometheus text for the whole tool: a broker's ``/metrics`` as a list of samples.

Everything that needs a number out of a broker's exposition (the downgrade's flush counters and process start
time, doctor's idle-store and writer checks) goes through :func:`parse_exposition`, so there is one rule for what
counts as an exposition and one for what a sample is. Parsing is prometheus-client's own parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# PIP-160's two batched writers, as Pulsar implements their names: every flush of either counts once under one
# trigger (max records, max size, max delay, large data).
FLUSH_PREFIXES = ("pulsar_txn_tc_bufferedwriter_flush_trigger_", "pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_")
PROCESS_START = "process_start_time_seconds"


class ExpositionError(ValueError):
    """The text is not a Prometheus exposition (an HTML page, JSON, garbage): it proves nothing either way."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of a text-format exposition; :class:`ExpositionError` when ``text`` is not one."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [Sample(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(f"not a Prometheus exposition ({exc})") from None


def batched_flushes_by_label(samples: list[Sample]) -> dict[str, float]:
    """The batched writers' flush count per ``broker`` label ('' for samples without one), every trigger and both
    writers summed; {} when the exposition carries no flush counter at all."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name.startswith(FLUSH_PREFIXES) and s.name.endswith("_total"):
            label = s.labels.get("broker", "")
            out[label] = out.get(label, 0.0) + s.value
    return out


def process_start_time(samples: list[Sample]) -> Optional[float]:
    """The exporting process's start (``process_start_time_seconds``), None when it is not exported."""
    for s in samples:
        if s.name == PROCESS_START:
            return s.value
    return None
