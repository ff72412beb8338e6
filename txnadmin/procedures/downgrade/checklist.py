"""The downgrade checklist file: versioned JSON, written atomically, read strictly; and what a recorded one holds.

Every write carries a digest of the content (``digest``: SHA-256 of the canonical JSON without it), and every read
checks it: a file edited by hand (say every LastBatched set to -1, which would make `status` say safe) is refused
as "edited outside txnadmin". This guards against accidents and well-meant edits, not against an adversary, who
can recompute the digest: the file is the operator's own record, and whoever may write it may also delete it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from ..._fs import atomic_write_text
from .report import DowngradeError


STATE_VERSION = 1
DEFAULT_STATE = "txnadmin-downgrade.json"


class StateError(Exception):
    """The checklist file is unreadable or not ours; the message names it."""


def _digest(state: dict[str, Any]) -> str:
    body = {k: v for k, v in state.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_state(path: Path, check_digest: bool = True) -> dict[str, Any] | None:
    """The checklist at ``path`` (None when there is none); StateError when it is unreadable, not ours, or (unless
    ``check_digest`` is off, for `reset` only) edited outside txnadmin."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise StateError(f"{path}: not a readable txnadmin checklist ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or data.get("kind") != "pip160-downgrade":
        raise StateError(f"{path}: not a txnadmin downgrade checklist (version {STATE_VERSION})")
    if check_digest and data.get("digest") != _digest(data):
        why = "it carries no digest" if "digest" not in data else "its digest does not match its content"
        raise StateError(f"{path}: edited outside txnadmin ({why}); restore the file txnadmin wrote, or discard it "
                         "with `txnadmin downgrade reset` and start over")
    data.pop("digest", None)
    return data


def save_state(path: Path, state: dict[str, Any]) -> None:
    """A kill at any moment leaves the old or the new checklist, never half of one."""
    state = dict(state)
    state["digest"] = _digest(state)
    atomic_write_text(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def new_state(target: str) -> dict[str, Any]:
    return {"version": STATE_VERSION, "kind": "pip160-downgrade", "target": target, "phase": "new",
            "coordinators": {}, "pendingAckStores": {}, "verification": None}


class ChecklistLock:
    """The one writer of a checklist: ``start`` and ``wait`` hold an exclusive lock on ``<checklist>.lock`` for their
    whole run, so two of them never lose each other's updates; everything else reads the checklist without saving.
    The holder's pid is written into the lock file so a refusal can name it."""

    def __init__(self, path: Path):
        self.path = Path(str(path) + ".lock")
        self._fd: int | None = None

    def __enter__(self) -> "ChecklistLock":
        import fcntl
        import os

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateError(f"{self.path.with_suffix('')}: the checklist is being written by another txnadmin "
                             f"(process {holder}, a running `downgrade start` or `wait`); let it finish or stop it, "
                             "then run this again (`downgrade status` reads it meanwhile)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        import os

        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def require_state(state_path: Path) -> dict[str, Any]:
    state = load_state(state_path)
    if state is None or state["phase"] != "recorded":
        raise DowngradeError(f"{state_path}: no recorded downgrade here; run `txnadmin downgrade start` first", 1)
    return state


def recorded_logs(state: dict) -> dict[tuple[str, str], dict]:
    return {**{("coordinator", k): v for k, v in state["coordinators"].items()},
            **{("pending-ack", k): v for k, v in state["pendingAckStores"].items()}}


def baselines_of(state: dict) -> dict[str, dict]:
    if "flushBaselines" in state:
        return state["flushBaselines"]
    # A checklist recorded before the process start time was kept: its counts, process unknown.
    legacy = state.get("batchedFlushesByBroker") or {}
    return {b: {"processStart": None, "flushes": v} for b, v in legacy.items()}


def accepted_count(state: dict) -> int:
    return sum(len(rec.get("acceptedReopens") or []) for bucket in ("coordinators", "pendingAckStores")
               for rec in state[bucket].values())


def flush_facts(state: dict) -> dict[str, dict]:
    """Broker → the batched flushes counted there and not yet discharged (see :func:`remember_flush`)."""
    return state.setdefault("batchedFlushes", {})


def remember_flush(state: dict, moved, by: str) -> bool:
    """Keep a counted batched flush as a fact of the checklist. It proves that something on that broker wrote a
    batched entry after the baselines, so it outlives the process that saw it, the broker's restart (which zeroes
    the counters) and every later baseline: only :func:`discharge_flushes`, after a re-record of every log that
    could have written it, ends it. Returns whether the checklist changed."""
    facts = flush_facts(state)
    known = facts.get(moved.broker)
    if known is not None and known.get("after", 0) >= moved.after and not moved.restarted:
        return False
    facts[moved.broker] = {"before": moved.before, "after": moved.after, "restarted": moved.restarted,
                           "seenAt": int(time.time() * 1000), "by": by, "evidence": moved.describe()}
    return True


def discharge_flushes(state: dict, how: str) -> None:
    """Every log that could have written the counted flushes was re-recorded (``how``): the facts end, kept as
    history for an audit."""
    facts = state.pop("batchedFlushes", None) or {}
    if facts:
        history = state.setdefault("dischargedFlushes", [])
        history.append({"facts": facts, "dischargedAt": int(time.time() * 1000), "by": how})
        del history[:-20]  # the last few are enough for an audit; the file stays small


def reset(state_path: Path) -> bool:
    """Delete the checklist, as its one writer: refused (StateError, naming the holder) while a `start` or `wait`
    holds it, so it never disappears under a running wait. A file edited by hand can still be discarded."""
    path = Path(state_path)
    with ChecklistLock(path):
        if path.exists():
            load_state(path, check_digest=False)  # refuse to delete a file that is not ours
            path.unlink()
            return True
        return False
