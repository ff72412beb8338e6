"""The downgrade checklist file: versioned JSON, written atomically, read strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._fs import atomic_write_text

STATE_VERSION = 1
DEFAULT_STATE = "txnadmin-downgrade.json"


class StateError(Exception):
    """The checklist file is unreadable or not ours; the message names it."""


def load_state(path: Path) -> dict[str, Any] | None:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise StateError(f"{path}: not a readable txnadmin checklist ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or data.get("kind") != "pip160-downgrade":
        raise StateError(f"{path}: not a txnadmin downgrade checklist (version {STATE_VERSION})")
    return data


def save_state(path: Path, state: dict[str, Any]) -> None:
    """A kill at any moment leaves the old or the new checklist, never half of one."""
    atomic_write_text(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def new_state(target: str) -> dict[str, Any]:
    return {"version": STATE_VERSION, "kind": "pip160-downgrade", "target": target, "phase": "new",
            "coordinators": {}, "pendingAckStores": {}, "verification": None}
