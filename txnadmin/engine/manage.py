"""Engine directory management behind `txnadmin engine …`: init, dump, settings."""

from __future__ import annotations

from pathlib import Path

from .config import ConfigError, EngineConfig, update_dynamic, update_dynamic_values
from .engine import Engine


class EngineDirError(Exception):
    """An engine directory that cannot be used; the message says why and what to do."""


def init_engine(directory: Path, settings: dict[str, str] | None = None, exist_ok: bool = False) -> EngineConfig:
    """Create an engine directory with its config and coordinators (Pulsar: initialize-transaction-coordinator-metadata)."""
    directory = Path(directory)
    if (directory / "metadata.db").exists() and not exist_ok:
        raise EngineDirError(f"{directory}: an engine already exists here (use it, give --exist-ok to update its "
                             "settings, or choose another directory)")
    if directory.exists() and not directory.is_dir():
        raise EngineDirError(f"{directory}: exists and is not a directory")
    config = EngineConfig.load(directory) if directory.exists() else EngineConfig()
    for key, value in (settings or {}).items():
        config.set(key, value)
    # Refuse a bad configuration whole before anything is written, the directory included: saved first, it made
    # the next `init` say an engine existed, and the error surfaced only when the writers opened. (save() checks
    # again; this check runs before mkdir.)
    config.validate()
    directory.mkdir(parents=True, exist_ok=True)
    config.save(directory)
    engine = Engine(directory, config, maintenance=False)
    # An existing engine keeps its coordinators (they are only ever scaled up, with `scale-transactionCoordinators`).
    if config.transactionCoordinatorCount != engine.coordinator_count():
        config.transactionCoordinatorCount = engine.coordinator_count()
        config.save(directory)
    engine.close()
    return config


def parse_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        EngineConfig().set(key.strip(), value.strip())  # validates name and type now, not later
        out[key.strip()] = value.strip()
    return out


def require_engine(directory: Path) -> Path:
    directory = Path(directory)
    if not (directory / "metadata.db").exists():
        raise EngineDirError(f"{directory}: no engine here (create one with `txnadmin engine init {directory}`)")
    return directory


def dump_engine(directory: Path, dest: Path) -> dict:
    """Copy the engine's entry logs and write its live ledger list, as an operator dumps a bookie."""
    require_engine(directory)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise EngineDirError(f"{dest}: not empty (dump into a new directory)")
    from .storage import LedgerStorage

    storage = LedgerStorage.open(directory, read_only=True)
    try:
        return storage.export(dest)
    finally:
        storage.close()


def set_dynamic(directory: Path, name: str, value: str | None) -> dict[str, str]:
    return update_dynamic(require_engine(directory), name, value)


def set_dynamic_values(directory: Path, changes: dict[str, str | None]) -> dict[str, str]:
    """Several dynamic settings at once, all checked before any is stored."""
    return update_dynamic_values(require_engine(directory), changes)
