"""The one reader of Prometheus text for the whole tool: a broker's ``/metrics`` as a list of samples.

Everything that needs a number out of a broker's exposition (the downgrade's flush counters and process start
time, doctor's idle-store check, ``txnadmin metrics`` and doctor's writer check) goes through
:func:`parse_exposition`, so there is one rule for what counts as an exposition and one for what a sample is.
Parsing is prometheus-client's own parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# PIP-160's two batched writers, as Pulsar implements their names: every flush of either counts once under one
# trigger (max records, max size, max delay, large data).
FLUSH_PREFIXES = ("pulsar_txn_tc_bufferedwriter_flush_trigger_", "pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_")
PROCESS_START = "process_start_time_seconds"
# A series that moves at every live scrape: the process's CPU time (a broker's JVM exports it with the start time).
PROCESS_CPU = "process_cpu_seconds"


class ExpositionError(ValueError):
    """The text is not a Prometheus exposition (an HTML page, JSON, garbage): it proves nothing either way."""

    def __init__(self, detail: str):
        super().__init__(f"not a Prometheus exposition ({detail})")
        self.detail = detail  # what was wrong with it (the parser's words quote the whole bad line)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    family: str = ""  # the metric family it belongs to (``x`` for ``x_bucket``; ``x`` or ``x_total`` for a counter)


def parse_exposition(text: str, only: tuple[str, ...] = ()) -> list[Sample]:
    """Every sample of a text-format exposition (only the metrics whose names start with one of ``only``, when
    given); :class:`ExpositionError` when ``text`` is not one.

    ``only`` keeps a poll cheap on a broker with topic-level metrics, whose exposition runs to megabytes: the
    lines of other metrics are dropped before the parser sees them (comments included, as they name a metric)."""
    from prometheus_client.parser import text_string_to_metric_families

    if text.lstrip()[:1] in ("<", "{", "["):
        raise ExpositionError("it looks like HTML or JSON")
    if only:
        text = "\n".join(line for line in text.splitlines() if _names(line, only))
    try:
        return [Sample(s.name, dict(s.labels), float(s.value), family.name)
                for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(str(exc)) from None


def _names(line: str, only: tuple[str, ...]) -> bool:
    if line.startswith("#"):
        parts = line.split(None, 3)
        return len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2].startswith(only)
    return line.startswith(only)


# What the downgrade reads of a broker's exposition.
DOWNGRADE_METRICS = (*FLUSH_PREFIXES, PROCESS_START, PROCESS_CPU)


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


def process_cpu_time(samples: list[Sample]) -> Optional[float]:
    """The exporting process's CPU seconds (``process_cpu_seconds_total``), None when it is not exported."""
    for s in samples:
        if s.name == PROCESS_CPU + "_total":
            return s.value
    return None
