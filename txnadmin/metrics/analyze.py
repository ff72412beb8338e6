"""Read a Prometheus exposition of PIP-160's buffered writers and turn it into shares and a recommendation.

Pulsar's implemented names (`{p}_bufferedwriter_*`, p = pulsar_txn_tc | pulsar_txn_pending_ack_store) are
preferred; the names PIP-160 proposed (never implemented, `olderst` typo included) are accepted too, and the
report says which set was found. The text is read by :func:`txnadmin.metrics.exposition.parse_exposition`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .exposition import ExpositionError, Sample, parse_exposition

DEFAULTS = {"MaxRecords": 512, "MaxSize": 4 * 1024 * 1024, "MaxDelayInMillis": 1}
COMPONENTS: dict[str, dict[str, Any]] = {
    "transaction coordinator log": {
        "implemented": "pulsar_txn_tc_bufferedwriter",
        "pip": {"records": "pulsar_txn_tc_log_records_count_per_entry",
                "size": "pulsar_txn_tc_batched_log_entry_size_bytes",
                "delay": "pulsar_txn_tc_batched_log_olderst_record_delay_time_seconds",
                "trigger": "pulsar_txn_tc_batched_log_triggering_count_by_"},
        "config": "transactionLogBatchedWrite",
    },
    "pending-ack store": {
        "implemented": "pulsar_txn_pending_ack_store_bufferedwriter",
        "pip": {"records": "pulsar_pending_ack_batched_log_records_count_per_entry",
                "size": "pulsar_pending_ack_batched_log_entry_size_bytes",
                "delay": "pulsar_pending_ack_batched_log_olderst_record_delay_time_seconds",
                "trigger": "pulsar_pending_ack_batched_log_triggering_count_by_"},
        "config": "transactionPendingAckBatchedWrite",
    },
}
PIP_TRIGGERS = {"records": "max_records", "size": "max_size", "delay_time": "max_delay"}


class MetricsError(Exception):
    """A source that cannot be read or holds no writer metrics; the message names it. ``unreadable``: the text is
    not a Prometheus exposition at all (it proves nothing, unlike an exposition without writer metrics)."""

    def __init__(self, message: str, unreadable: bool = False):
        super().__init__(message)
        self.unreadable = unreadable


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound → cumulative count
    total: float = 0.0
    count: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def shares(self) -> dict[str, float]:
        out, previous, prev_bound = {}, 0.0, None
        for bound in sorted(self.buckets):
            label = f"<= {bound:g}" if prev_bound is None else f"{prev_bound:g}–{bound:g}"
            if bound == float("inf"):
                label = f"> {prev_bound:g}" if prev_bound is not None else "all"
            n = self.buckets[bound] - previous
            out[label] = n / self.count if self.count else 0.0
            previous, prev_bound = self.buckets[bound], bound
        return out


@dataclass
class ComponentReport:
    component: str
    names: str  # "implemented" | "pip-160"
    triggers: dict[str, float]
    records: Histogram
    size: Histogram
    delay: Histogram
    recommendation: dict = field(default_factory=dict)

    @property
    def flushes(self) -> float:
        return sum(v for k, v in self.triggers.items() if k != "large_data")

    def trigger_shares(self) -> dict[str, float]:
        total = self.flushes
        return {k: (v / total if total else 0.0) for k, v in self.triggers.items() if k != "large_data"}

    def to_json(self) -> dict:
        return {"component": self.component, "metricNames": self.names, "flushes": self.flushes,
                "flushesByTrigger": self.triggers, "triggerShares": self.trigger_shares(),
                "recordsPerEntry": {"mean": self.records.mean, "distribution": self.records.shares()},
                "bytesPerEntry": {"mean": self.size.mean},
                "oldestRecordDelaySeconds": {"mean": self.delay.mean},
                "flushesForcedByLargeRecords": self.triggers.get("large_data", 0.0),
                "recommendation": self.recommendation}


def fetch(source: str, token: Optional[str] = None, get: Optional[Callable[[str, Optional[str]], str]] = None) -> str:
    """Exposition text from a URL, a file, or `local:PATH` (the /metrics of the engine running there).

    URLs are read by ``get(url, token)``: the caller's HTTP client, so a metrics URL keeps the rules of every other
    call (one deadline, the shared retry policy, credentials only within the cluster). Without one, a URL is refused.
    """
    if source.startswith("local:"):
        directory = Path(source[len("local:"):])
        try:
            info = json.loads((directory / "server.json").read_text())
        except (OSError, json.JSONDecodeError):
            raise MetricsError(f"{source}: no running engine (start `txnadmin engine run` or `txnadmin serve`)") from None
        source, token = info["url"].rstrip("/") + "/metrics", info.get("token")
    if source.startswith(("http://", "https://")):
        if get is None:
            raise MetricsError(f"{source}: no HTTP client given to read it")
        return get(source, token)
    try:
        return Path(source).read_text()
    except OSError as exc:
        raise MetricsError(f"{source}: cannot read ({exc.strerror or exc})") from None


def _families(text: str) -> dict[str, list[Sample]]:
    try:
        samples = parse_exposition(text)
    except ExpositionError as exc:
        detail = " ".join(exc.detail.split())
        detail = detail if len(detail) <= 160 else detail[:157] + "..."  # the parser quotes the whole bad line
        raise MetricsError(f"not a Prometheus exposition ({detail})", unreadable=True) from None
    out: dict[str, list[Sample]] = {}
    for sample in samples:
        out.setdefault(sample.family, []).append(sample)  # the same name may come back per label set
    return out


def _histogram(samples: list[Sample]) -> Histogram:
    h = Histogram()
    for s in samples:
        if s.name.endswith("_bucket"):
            bound = float(s.labels["le"])
            h.buckets[bound] = h.buckets.get(bound, 0.0) + s.value
        elif s.name.endswith("_sum"):
            h.total += s.value
        elif s.name.endswith("_count"):
            h.count += s.value
    return h


def _counter(fams: dict[str, list[Sample]], name: str) -> float:
    """A counter's value summed over label sets, whichever way the exposition named its family."""
    samples = fams.get(name) or fams.get(name + "_total") or []
    return sum(s.value for s in samples if not s.name.endswith("_created"))


def analyze_text(text: str, thresholds: Optional[dict[str, float]] = None) -> list[ComponentReport]:
    fams = _families(text)
    reports = []
    for component, names in COMPONENTS.items():
        prefix = names["implemented"]
        if f"{prefix}_batch_records" in fams:
            triggers = {t: _counter(fams, f"{prefix}_flush_trigger_{t}")
                        for t in ("max_records", "max_size", "max_delay", "large_data")}
            report = ComponentReport(component, "implemented", triggers, _histogram(fams[f"{prefix}_batch_records"]),
                                     _histogram(fams.get(f"{prefix}_batch_size_bytes", [])),
                                     _histogram(fams.get(f"{prefix}_batch_oldest_record_delay_seconds", [])))
        elif names["pip"]["records"] in fams:
            pip = names["pip"]
            triggers = {PIP_TRIGGERS[k]: _counter(fams, pip["trigger"] + k) for k in PIP_TRIGGERS}
            triggers["large_data"] = 0.0
            report = ComponentReport(component, "pip-160", triggers, _histogram(fams[pip["records"]]),
                                     _histogram(fams.get(pip["size"], [])), _histogram(fams.get(pip["delay"], [])))
        else:
            continue
        report.recommendation = recommend(report, names["config"], thresholds or {})
        reports.append(report)
    if not reports:
        looked = ", ".join(f"{c['implemented']}_* / {c['pip']['records']}" for c in COMPONENTS.values())
        raise MetricsError(f"no buffered-writer metrics found (looked for {looked})")
    return reports


def analyze_registry(registry, thresholds: Optional[dict[str, float]] = None) -> list[ComponentReport]:
    from prometheus_client import generate_latest

    return analyze_text(generate_latest(registry).decode(), thresholds)


def recommend(report: ComponentReport, config_prefix: str, thresholds: dict[str, float]) -> dict:
    """Rules, in order; each says why. Values are what to set, keys Pulsar's broker.conf names."""
    current = {k: float(thresholds.get(config_prefix + k, DEFAULTS[k])) for k in DEFAULTS}
    assumed = not any(config_prefix + k in thresholds for k in DEFAULTS)
    keys = {k: config_prefix + k for k in DEFAULTS}
    out: dict = {"current": {keys[k]: v for k, v in current.items()}, "assumedDefaults": assumed, "set": {}}
    flushes = report.flushes
    shares = report.trigger_shares()
    mean_records = report.records.mean
    large = report.triggers.get("large_data", 0.0)
    if flushes == 0:
        out["reason"] = "no batched flushes: batching is off for this component or it is idle; nothing to tune"
        return out
    reasons = []
    if shares.get("max_delay", 0) >= 0.8:
        pct = shares["max_delay"] * 100
        if mean_records < 10:
            new_delay = min(max(current["MaxDelayInMillis"] * 5, 5), 50)
            reasons.append(f"{pct:.0f} % of flushes are by delay with {mean_records:.1f} records on average: batching "
                           f"buys little at this load; raising the max delay to {new_delay:g} ms gathers more "
                           f"records per entry at up to {new_delay - current['MaxDelayInMillis']:g} ms more latency")
            out["set"][keys["MaxDelayInMillis"]] = new_delay
        else:
            reasons.append(f"{pct:.0f} % of flushes are by delay with {mean_records:.1f} records on average: the delay "
                           "decides, which is right for a steady load; keep the thresholds")
    if shares.get("max_records", 0) >= 0.5:
        new_records = int(min(current["MaxRecords"] * 2, 8192))
        reasons.append(f"{shares['max_records'] * 100:.0f} % of flushes hit max records "
                       f"({current['MaxRecords']:g}): raise it to {new_records} so entries carry more records")
        out["set"][keys["MaxRecords"]] = new_records
    if shares.get("max_size", 0) >= 0.5:
        new_size = int(min(current["MaxSize"] * 2, 64 * 1024 * 1024))
        reasons.append(f"{shares['max_size'] * 100:.0f} % of flushes hit max size ({current['MaxSize']:g} bytes, "
                       f"{report.size.mean:.0f} bytes per entry on average): raise it to {new_size} or check why "
                       "records are large")
        out["set"][keys["MaxSize"]] = new_size
    if large:
        reasons.append(f"{large:g} flushes were forced by records of at least max size, which bypass batching "
                       "(written plain)")
    if not reasons:
        reasons.append(f"flushes are spread across triggers ({', '.join(f'{k} {v:.0%}' for k, v in shares.items())}) "
                       f"with {mean_records:.1f} records per entry: keep the thresholds")
    out["reason"] = "; ".join(reasons)
    return out
