"""Each component's ``recoverStartTime`` across its opens, kept in the engine's metadata.

`downgrade` proves that a store or coordinator reopened by its ``recoverStartTime`` changing, as on a real broker.
So every open of a writable engine shows a new, distinct value (even within one millisecond, or under a frozen
test clock), saved durably before the component takes a write, and distinct across engine restarts too. A
read-only view shows the last open's saved value (0, no evidence, when none was saved).
"""

from __future__ import annotations

import json
from typing import Any

META_OPENED = "engine/opened/"


class OpenTimes:
    def __init__(self, storage: Any, read_only: bool):
        self.storage = storage
        self.read_only = read_only
        self._last: dict[str, int] = {}  # key -> the last recoverStartTime shown
        self._saved = {key[len(META_OPENED):]: json.loads(storage.meta_get(key) or b"{}")
                       for key in storage.meta_list(META_OPENED)}
        self._unsaved: dict[str, bytes] = {}
        self.deferred = True  # while the engine opens everything: saved in one commit at the end (save())

    def opened(self, key: str, component: Any) -> None:
        """Set ``component``'s recoverStartTime (and end time) for this open of ``key`` ("tc/N", "pending-ack/...")."""
        saved = self._saved.get(key, {})
        if self.read_only:
            component.recover_start_time = int(saved.get("recoverStartTime", 0))
            component.recover_end_time = int(saved.get("recoverEndTime", 0))
            return
        if key not in self._last and saved.get("recoverStartTime"):
            self._last[key] = int(saved["recoverStartTime"])  # stay distinct across restarts too
        component.recover_start_time = self._distinct(key, component.recover_start_time)
        component.recover_end_time = max(component.recover_end_time, component.recover_start_time)
        value = {"recoverStartTime": component.recover_start_time, "recoverEndTime": component.recover_end_time}
        self._saved[key] = value
        self._unsaved[META_OPENED + key] = json.dumps(value).encode()
        if not self.deferred:
            self.save()

    def save(self) -> None:
        if self._unsaved and not self.read_only:
            items, self._unsaved = self._unsaved, {}
            self.storage.meta_put_many(items)

    def forget(self, key: str) -> str:
        """Drop ``key`` (its store was deleted); returns its metadata key, for the caller's own delete."""
        self._saved.pop(key, None)
        return META_OPENED + key

    def _distinct(self, key: str, started_ms: int) -> int:
        last = self._last.get(key)
        value = started_ms if last is None or started_ms > last else last + 1
        self._last[key] = value
        return value
