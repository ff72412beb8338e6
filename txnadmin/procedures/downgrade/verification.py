"""`verify`: scan the bookies' dumps for live batched entries, once the dumps are proven to be this target's,
and fold the verdict into the checklist."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ...admin.endpoints import coordinator_ids
from ...admin.protocol import NotFoundError, TransactionsAdmin
from ...names import transaction_log_local_name
from .checklist import ChecklistLock, require_state, save_state
from .logs import TC_OWNER_LOG, LogReader, coordinator_not_loaded
from .report import DowngradeError
from .target import (
    Progress, admin_call, check_identity, ledger_history_fits, not_this_cluster, now_ms, target_identity, topic_listing,
)


def record_verification(state_path: Path, result: dict) -> dict:
    with ChecklistLock(state_path):  # the checklist's one writer: refused while a `wait` holds it
        state = require_state(state_path)
        state["verification"] = result
        save_state(state_path, state)
        return state


_NAMED_IN_REFUSAL = 3  # ledgers a refusal names; the count says how many more


@dataclass
class _Held:
    """A ledger the target lists as live for a recorded log."""

    log: str  # how status names the log
    managed_ledger: Optional[str]
    entries: Optional[int]  # only for a closed ledger (any but the log's newest), when the target states it


def _ledger_list_digest(path: Path) -> tuple[int, str]:
    """(size, sha256) of the ledger list; the scan's own error when it cannot be read."""
    import hashlib

    from ...scan import ScanInputError

    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise ScanInputError(f"{path}: cannot read ledger list ({exc.strerror or exc})") from None
    return size, digest.hexdigest()


def _held_ledgers(admin: TransactionsAdmin, state: dict, state_path: Path, concurrency: int,
                  progress: Progress) -> dict[int, _Held]:
    """Every ledger the target lists, now, as live for a log recorded in the checklist (exit 3 if it cannot say)."""
    logs = [LogReader(admin, "coordinator", k, {}) for k in sorted(state["coordinators"], key=int)]
    logs += [LogReader(admin, "pending-ack", k, rec) for k, rec in sorted(state["pendingAckStores"].items())]

    def one(log: LogReader) -> tuple[LogReader, Optional[tuple[Optional[str], list[dict]]]]:
        try:
            return log, log.live_ledgers()
        except NotFoundError:
            return log, None

    held: dict[int, _Held] = {}
    gone: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(logs)))) as pool:
        for count, (log, read) in enumerate(pool.map(one, logs), 1):
            if progress:
                progress(count, len(logs))
            if read is None:
                if log.component == "coordinator":
                    if int(log.key) not in admin_call(lambda: coordinator_ids(admin.list_coordinators())):
                        raise not_this_cluster(log.key)
                    raise DowngradeError(coordinator_not_loaded(log.key) + ": cannot tell which of its ledgers are "
                                         "live; run `txnadmin downgrade verify` again once it answers; if it does "
                                         f"not, {TC_OWNER_LOG}", 3)
                gone.append(log.key)
                continue
            name, ledgers = read
            ids = [int(l["ledgerId"]) for l in ledgers]
            if log.component == "coordinator":
                ledger_history_fits(state, log.key, ids, state_path)
            label = transaction_log_local_name(log.key) if log.component == "coordinator" else log.key
            newest = max(ids, default=None)
            for lid, info in zip(ids, ledgers, strict=True):
                entries = info.get("entries")
                closed = lid != newest and isinstance(entries, int) and not isinstance(entries, bool)
                held[lid] = _Held(label, name, entries if closed else None)
    if gone:
        # Gone from the listing: deleted, nothing of it to prove. Listed but 404: not loaded, its ledgers unknown.
        listing = topic_listing(admin, concurrency)
        unloaded = [key for key in gone if key in listing]
        if unloaded:
            more = f" (and {len(unloaded) - 1} more)" if len(unloaded) > 1 else ""
            raise DowngradeError(f"store {unloaded[0]}{more} is listed on the target but its stats answer 404 (not "
                                 "loaded): cannot tell which of its ledgers are live; load its topic (e.g. "
                                 "`pulsar-admin topics stats <topic>`) and run `txnadmin downgrade verify` again", 3)
    return held


def _refuse_uncovered(held: dict[int, _Held], live: Optional[dict], named: frozenset, source: str,
                      state_path: Path) -> None:
    """Exit 3 when the ledger list does not hold this target's live ledgers as the scan will judge them."""
    from ...scan.job import judged_ledgers

    judged = judged_ledgers(live, named)
    missing, unnamed, differ = [], [], []
    for lid in sorted(held):
        ours, listed = held[lid], (live or {}).get(lid)
        here = ours.managed_ledger or ours.log
        if lid not in judged:
            if listed is None:
                missing.append(f"{lid} of {ours.log}")
            elif not listed.has_metadata:
                unnamed.append(f"{lid} of {ours.log}")
            else:  # the same id on another cluster: another managed ledger's, or a cursor's
                there = f"{listed.managed_ledger or 'no managed ledger'}{' cursor ' + listed.cursor if listed.cursor else ''}"
                differ.append(f"{lid}: {there} there, {here} here")
        elif listed is not None and listed.has_metadata:
            if ours.managed_ledger and listed.managed_ledger and listed.managed_ledger != ours.managed_ledger:
                differ.append(f"{lid}: {listed.managed_ledger} there, {here} here")
            elif ours.entries is not None and listed.closed and listed.last_entry_id + 1 != ours.entries:
                differ.append(f"{lid}: {listed.last_entry_id + 1} entries there, {ours.entries} here")
    if not (missing or unnamed or differ):
        return

    def few(items: list[str]) -> str:
        more = f" and {len(items) - _NAMED_IN_REFUSAL} more" if len(items) > _NAMED_IN_REFUSAL else ""
        return "; ".join(items[:_NAMED_IN_REFUSAL]) + more

    parts = [f"{len(held)} ledgers are live on the target for the logs recorded in {state_path}, but {source}"]
    if missing:
        parts.append(f"lacks {len(missing)} of them ({few(missing)})")
    if unnamed:
        parts.append(f"lists {len(unnamed)} of them without metadata and --txn-ledgers does not name them "
                     f"({few(unnamed)})")
    if differ:
        parts.append(f"holds {len(differ)} of them as other ledgers ({few(differ)})")
    raise DowngradeError(f"{parts[0]} {', '.join(parts[1:])}: these dumps are another cluster's, or older than its "
                         "ledgers; nothing recorded: copy this cluster's dumps, then take `bookkeeper shell "
                         "listledgers -meta`, and run verify again", 3)


def _dump_inputs(paths: list[str], inputs: list[dict]) -> list[dict]:
    """Each dump path as given, with how many files and bytes the scan read under it."""
    out = []
    for raw in paths:
        root = os.path.abspath(raw)
        mine = [i for i in inputs if i["path"] == root or i["path"].startswith(root.rstrip(os.sep) + os.sep)]
        out.append({"path": root, "files": len(mine), "bytes": sum(i["bytes"] for i in mine)})
    return out


def _recorded_logs(state: dict) -> tuple[list[str], list[str]]:
    return sorted(state["coordinators"]), sorted(state["pendingAckStores"])


def verify(admin: TransactionsAdmin, state_path: Path, dumps: list[str], ledgers: Optional[Path] = None,
           txn_ledgers: Optional[str] = None, ledger_id_format: str = "long", fmt: str = "auto", engine: str = "auto",
           target: Optional[str] = None, concurrency: int = 16, progress: Progress = None) -> tuple[Any, dict]:
    """Scan the bookies' dumps and fold the verdict into the checklist, if they are this target's.

    The ledger list (``ledgers``, and the ids named in ``txn_ledgers``) must hold, as the scan judges them, every
    ledger the target lists now as live for a recorded log: a clean scan of another cluster's dumps proves nothing
    here. Refused (exit 3) with nothing recorded otherwise. Returns (the ScanResult, the entry recorded, with what
    it was checked against for an audit). Scan errors: ScanUsageError (2), ScanInputError (3).
    """
    from ...scan import run_scan
    from ...scan.job import check_options, parse_txn_ledgers, read_live_list

    check_options(fmt, engine, ledger_id_format)
    named = parse_txn_ledgers(txn_ledgers, ledger_id_format)
    state = require_state(state_path)
    digest = _ledger_list_digest(ledgers) if ledgers else None
    live = read_live_list(ledgers, ledger_id_format, named) if ledgers else None
    ident = target_identity(admin, target if target is not None else state["identity"]["adminUrl"])
    check_identity(state, ident, state_path)
    held: Optional[dict[int, _Held]] = None
    if live is not None or named:
        # (Without any list the scan cannot say clean: its verdict, incomplete, is recorded as it is.)
        held = _held_ledgers(admin, state, state_path, concurrency, progress)
        source = f"{ledgers}{' with --txn-ledgers' if named else ''}" if ledgers else "--txn-ledgers"
        _refuse_uncovered(held, live, named, source, state_path)
    paths = [str(p) for p in dumps]
    # Only a list named here was checked against the target above: a dump's own ledgers.txt is never taken unseen.
    result = run_scan(paths, ledgers_file=ledgers, engine=engine, fmt=fmt, txn_ledgers=named,
                      ledger_id_format=ledger_id_format, dump_list=False)
    if ledgers and _ledger_list_digest(ledgers) != digest:
        raise DowngradeError(f"{ledgers} changed while verify read it; nothing was recorded: run `txnadmin downgrade "
                             "verify` again with a list that stays put", 3)
    record = {"verdict": result.verdict, "liveBatchedEntries": result.live_batched_entries, "engine": result.engine,
              "reasons": result.reasons[:20], "verifiedAt": now_ms(),
              "target": {"adminUrl": ident["adminUrl"], "clusterName": ident.get("clusterName")},
              "dumps": _dump_inputs(paths, result.inputs),
              "ledgerList": ({"path": os.path.abspath(ledgers), "bytes": digest[0], "sha256": digest[1]}
                             if ledgers and digest else None),
              "txnLedgers": txn_ledgers or None, "ledgerIdFormat": ledger_id_format,
              "liveLedgersChecked": None if held is None else len(held)}
    # Read again under the checklist's lock (its one writer; refused while a `start` or `wait` holds it): a
    # `wait` may have saved it during a long scan, and its updates stay.
    with ChecklistLock(state_path):
        now = require_state(state_path)
        check_identity(now, ident, state_path)
        if _recorded_logs(now) != _recorded_logs(state):
            raise DowngradeError(f"{state_path}: logs were recorded while verify ran (`start` again?); nothing was "
                                 "recorded: run `txnadmin downgrade verify` again", 3)
        now["verification"] = record
        save_state(state_path, now)
    return result, record
