"""Engine configuration, in Pulsar's broker.conf vocabulary.

The file `<engine dir>/engine.conf` uses broker.conf syntax (``key=value``, ``#`` comments) and
broker.conf names for everything that exists in Pulsar; engine-only knobs start with ``engine``.
Dynamic settings live in `<engine dir>/dynamic-config.json` (Pulsar keeps them in the metadata
store); a running engine polls that file, so a change from another process lands within a second.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .._fs import atomic_write_text

CONF_FILE = "engine.conf"
DYNAMIC_FILE = "dynamic-config.json"


class ConfigError(ValueError):
    """A bad configuration value; the message names the key and what is wrong.

    The engine's only configuration error: the buffered writer raises it too, so every caller catches one class."""


# Pulsar's TransactionBatchedWriteValidator: the lowest thresholds broker.conf may set, checked as the broker starts
# and only while that writer's batching is on there. Neither a later dynamic-config switch nor the writer itself
# checks them (TxnLogBufferedWriter only turns batching off for max records <= 1): docs/engine.md cites both.
BATCHED_WRITE_PREFIXES = ("transactionLogBatchedWrite", "transactionPendingAckBatchedWrite")
BATCHED_WRITE_MINIMUMS = (("MaxRecords", 10), ("MaxSize", 131072), ("MaxDelayInMillis", 1))


def check_batched_write(prefix: str, enabled: bool, max_records: float, max_size: float, max_delay_ms: float) -> None:
    """The one batching rule, for the engine's configuration and for each writer's: ConfigError naming
    ``prefix`` + the threshold's name (``transactionPendingAckBatchedWriteMaxSize``) when a threshold is too low."""
    if not enabled:
        return
    for (suffix, minimum), value in zip(BATCHED_WRITE_MINIMUMS, (max_records, max_size, max_delay_ms), strict=True):
        if value < minimum:
            raise ConfigError(f"Configuration field '{prefix}{suffix}' value must be greater than or equal to "
                              f"{minimum}")


@dataclass
class EngineConfig:
    # -- broker.conf names ---------------------------------------------------------------------
    transactionCoordinatorEnabled: bool = True
    # /metrics: false (Pulsar's default) renders every scrape afresh; true serves one rendering per
    # managedLedgerStatsPeriodSeconds slot, as Pulsar's PrometheusMetricsGenerator does
    metricsBufferResponse: bool = False
    managedLedgerStatsPeriodSeconds: int = 60
    clusterName: str = "standalone"  # the `cluster` label on every metric and what GET /admin/v2/clusters answers
    transactionCoordinatorCount: int = 16  # engine: how many TCs `engine init` creates (Pulsar: transaction_coordinator_assign partitions)
    transactionLogBatchedWriteEnabled: bool = False
    transactionLogBatchedWriteMaxRecords: int = 512
    transactionLogBatchedWriteMaxSize: int = 4 * 1024 * 1024
    transactionLogBatchedWriteMaxDelayInMillis: int = 1
    transactionPendingAckBatchedWriteEnabled: bool = False
    transactionPendingAckBatchedWriteMaxRecords: int = 512
    transactionPendingAckBatchedWriteMaxSize: int = 4 * 1024 * 1024
    transactionPendingAckBatchedWriteMaxDelayInMillis: int = 1
    transactionPendingAckLogIndexMinLag: int = 500
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10
    managedLedgerMaxLedgerRolloverTimeMinutes: float = 240
    managedLedgerMaxSizePerLedgerMbytes: float = 2048
    transactionBufferSnapshotMaxTransactionCount: int = 1000
    transactionBufferSnapshotMinTimeInMillis: int = 5000
    transactionBufferSegmentedSnapshotEnabled: bool = False
    transactionBufferSnapshotSegmentSize: int = 262144
    transactionMetaPersistCount: int = 0
    transactionMetaPersistTimeInHour: float = 72
    transactionMetaExpireCheckIntervalInSecond: int = 60
    # -- engine-only knobs ---------------------------------------------------------------------
    engineEntryLogSizeLimitBytes: int = 64 * 1024 * 1024
    engineDefaultTransactionTimeoutMillis: int = 60_000
    engineTimeoutCheckIntervalMillis: int = 100
    engineBrokerServiceUrl: str = "pulsar://127.0.0.1:6650"
    # The Pulsar release whose behaviour the engine reproduces, by default the current one (5.0.0: pending-ack store
    # names URL-encode the subscription, PR #25727, and every fix doctor checks versions for is in, so a fresh engine
    # is healthy under `doctor`); tests and rehearsals of an older broker set an older version.
    engineBrokerVersion: str = "5.0.0"
    engineTransactionMetaPersistMaxTotal: int = 100_000  # PIP-255 memory bound across all clients of one TC
    engineTransactionBufferSegmentsOnDemand: bool = True  # segmented snapshots: load segments when needed, not all at recovery
    engineTransactionBufferSegmentCacheSize: int = 4  # sealed segments kept in memory per topic (on-demand loading)
    engineTransactionBufferSharedSnapshotReader: bool = True  # one snapshot-log reader per namespace, not one per topic
    # Pulsar leaves an unloaded topic closed until something looks it up; the engine reloads it at once unless this is on
    engineUnloadLeavesTopicUnloaded: bool = False
    # The brokers a served engine plays in its one process, each on its own 127.0.0.1 port (engine/cluster/)
    engineBrokers: int = 1
    # Per broker, in order, how long a dynamic-config change takes to reach it (its ZooKeeper watch), in ms; comma
    # separated, the last value holding for the brokers after it
    engineBrokerWatchDelaysMillis: str = "0"
    # The brokers (indexes from 0, comma separated) whose /metrics leaves out process_start_time_seconds, as behind a
    # relabelling that drops it or a JVM exporter without its process collector; empty: every broker exports it
    engineBrokersWithoutProcessStart: str = ""
    # How long a stopped broker keeps its bundles before the survivors take them over (its session's expiry)
    engineBrokerFailoverDelayMillis: int = 1000

    # Pulsar's ServiceConfiguration marks only the two switches dynamic; the thresholds are read from broker.conf.
    DYNAMIC_KEYS = (
        "transactionLogBatchedWriteEnabled",
        "transactionPendingAckBatchedWriteEnabled",
    )

    # -- loading and saving ---------------------------------------------------------------------
    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def set(self, key: str, raw: Any) -> None:
        """Set ``key`` from text or a JSON value, converting to the field's type; ConfigError if bad."""
        types = {f.name: f.type for f in fields(self)}
        if key not in types:
            raise ConfigError(f"unknown setting {key!r}{did_you_mean(key)}")
        kind = types[key]
        try:
            value = _convert(raw, kind)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: {raw!r} is not a valid {kind}") from None
        setattr(self, key, value)

    def validate(self) -> None:
        """Everything a set of values must satisfy together (one key at a time is checked by :meth:`set`).

        Run before a configuration is saved or applied, so a bad one is refused whole and nothing is written."""
        if self.transactionCoordinatorCount < 1:  # as initialize-transaction-coordinator-metadata refuses it
            raise ConfigError("Configuration field 'transactionCoordinatorCount' value must be greater than or equal "
                              f"to 1 (got {self.transactionCoordinatorCount})")
        if self.managedLedgerStatsPeriodSeconds < 1:  # Pulsar's minValue for the key
            raise ConfigError("Configuration field 'managedLedgerStatsPeriodSeconds' value must be greater than or "
                              f"equal to 1 (got {self.managedLedgerStatsPeriodSeconds})")
        if not 1 <= self.engineBrokers <= MAX_BROKERS:
            raise ConfigError(f"Configuration field 'engineBrokers' value must be between 1 and {MAX_BROKERS} "
                              f"(got {self.engineBrokers})")
        watch_delays_ms(self.engineBrokerWatchDelaysMillis, self.engineBrokers)
        brokers_without_process_start(self.engineBrokersWithoutProcessStart, self.engineBrokers)
        if self.engineBrokerFailoverDelayMillis < 0:
            raise ConfigError("Configuration field 'engineBrokerFailoverDelayMillis' value must be 0 or more "
                              f"(got {self.engineBrokerFailoverDelayMillis})")
        for prefix in BATCHED_WRITE_PREFIXES:
            check_batched_write(prefix, *(getattr(self, prefix + name) for name in
                                          ("Enabled", "MaxRecords", "MaxSize", "MaxDelayInMillis")))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def to_text(self) -> dict[str, str]:
        """Every key with its value as broker.conf spells it (``true``, not ``True``)."""
        return {name: _render(value) for name, value in self.to_dict().items()}

    @classmethod
    def load(cls, directory: Path, dynamic: bool = True) -> "EngineConfig":
        """engine.conf, then (``dynamic``) the dynamic overrides on top."""
        config = cls()
        path = Path(directory) / CONF_FILE
        if path.exists():
            for number, line in enumerate(path.read_text().splitlines(), 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
                try:
                    config.set(key.strip(), value.strip())
                except ConfigError as exc:
                    raise ConfigError(f"{path}:{number}: {exc}") from None
            try:  # the broker's startup check, on the file alone: dynamic overrides come after it
                config.validate()
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
        if dynamic:
            config.apply_dynamic(read_dynamic(directory))
        return config

    def save(self, directory: Path) -> Path:
        """Write engine.conf atomically, after :meth:`validate`: a configuration the engine cannot open is never
        written (ConfigError, the file left as it was)."""
        self.validate()
        lines = ["# txnadmin engine configuration (broker.conf names; engine* keys are engine-only)"]
        lines += [f"{k}={_render(v)}" for k, v in self.to_dict().items()]
        path = Path(directory) / CONF_FILE
        atomic_write_text(path, "\n".join(lines) + "\n")
        return path

    def apply_dynamic(self, overrides: dict[str, str]) -> None:
        for key, value in overrides.items():
            if key in self.DYNAMIC_KEYS:
                self.set(key, value)

    def ledger_rollover(self) -> dict[str, Any]:  # ManagedLedgerConfig's keyword arguments
        return {
            "max_entries_per_ledger": self.managedLedgerMaxEntriesPerLedger,
            "min_ledger_rollover_time_ms": self.managedLedgerMinLedgerRolloverTimeMinutes * 60_000,
            "max_ledger_rollover_time_ms": self.managedLedgerMaxLedgerRolloverTimeMinutes * 60_000,
            "max_size_per_ledger_bytes": int(self.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024),
        }


MAX_BROKERS = 16  # one process plays them all: a bound on threads and ports, not a Pulsar limit


def watch_delays_ms(raw: str, brokers: int) -> list[int]:
    """``engineBrokerWatchDelaysMillis`` as one delay per broker (the last value repeated); ConfigError if bad."""
    try:
        values = [int(part) for part in raw.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 0 for v in values):
        raise ConfigError("Configuration field 'engineBrokerWatchDelaysMillis' must be milliseconds of 0 or more, "
                          f"comma separated (got {raw!r})")
    return (values + [values[-1]] * brokers)[:brokers]


def brokers_without_process_start(raw: str, brokers: int) -> frozenset[int]:
    """``engineBrokersWithoutProcessStart`` as the indexes of those brokers (0: the first); ConfigError if bad."""
    parts = [part.strip() for part in raw.split(",")] if raw.strip() else []
    if not all(re.fullmatch(r"[0-9]+", part) and int(part) < brokers for part in parts):
        raise ConfigError("Configuration field 'engineBrokersWithoutProcessStart' must be broker indexes from 0 to "
                          f"{brokers - 1} (engineBrokers={brokers}), comma separated, or empty (got {raw!r})")
    return frozenset(int(part) for part in parts)


def _convert(raw: Any, kind: Any) -> Any:
    name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if name == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ValueError(raw)
    if name == "int":
        if isinstance(raw, bool):
            raise ValueError(raw)
        return int(str(raw).strip())
    if name == "float":
        return float(str(raw).strip())
    return str(raw)


def _render(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- dynamic configuration (what `brokers update-dynamic-config` writes) ------------------------

def read_dynamic(directory: Path) -> dict[str, str]:
    path = Path(directory) / DYNAMIC_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, OSError) as exc:
        raise ConfigError(f"{path}: unreadable dynamic configuration ({exc})") from None
    return {str(k): str(v) for k, v in data.get("values", {}).items()}


def did_you_mean(name: str, dynamic_only: bool = False) -> str:
    """``; did you mean 'X'?`` for a misspelt setting (the closest known name), or nothing when none is close."""
    import difflib

    known = sorted(EngineConfig.DYNAMIC_KEYS) if dynamic_only else [f.name for f in fields(EngineConfig)]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def write_dynamic(directory: Path, values: dict[str, str]) -> None:
    atomic_write_text(Path(directory) / DYNAMIC_FILE, json.dumps({"values": values}, indent=2, sort_keys=True) + "\n")


def update_dynamic(directory: Path, name: str, value: str | None) -> dict[str, str]:
    """Validate and store one override (None removes it), like POST/DELETE /admin/v2/brokers/configuration."""
    return update_dynamic_values(directory, {name: value})


def update_dynamic_values(directory: Path, changes: dict[str, str | None]) -> dict[str, str]:
    """:func:`update_dynamic` for several overrides at once: every one is checked before any is stored, so a bad
    one leaves the file as it was."""
    values = read_dynamic(directory)
    for name, value in changes.items():
        if name not in EngineConfig.DYNAMIC_KEYS:
            raise ConfigError(f"Can't update non-dynamic configuration {name}")
        if value is None:
            values.pop(name, None)
            continue
        # Only the value's type is checked, as Pulsar's dynamic update does: turning batching on later is accepted
        # whatever the thresholds (the startup check saw batching off), and the writer copes with any of them.
        probe = EngineConfig()
        try:
            probe.set(name, value)
        except ConfigError as exc:  # worded as Pulsar's 412 answer to POST /brokers/configuration
            raise ConfigError(f" Invalid dynamic-config value: {exc}") from None
        values[name] = _render(getattr(probe, name))
    write_dynamic(directory, values)
    return values

