"""Per-ledger evidence from findings, mergeable in any order: the one summary both engines build.

Each Spark partition (or the in-process loop) folds its findings into a :class:`Tally`; tallies merge into one,
and the verdict is judged from that alone, so both engines give the same report by construction. Entry ids are
kept as sorted ranges (entries of a ledger are mostly consecutive inside a file), which keeps a tally small even
for millions of entries; replicas of an entry from several bookies collapse into one id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .classify import BAD_DIGEST, BATCHED, EMPTY, PLAIN, UNREADABLE
from .digests import VERIFIED
from .formats import Finding

EXAMPLES_PER_LEDGER = 20
DAMAGE_EXAMPLES = 100


class RangeSet:
    """A set of non-negative ints as sorted, disjoint, inclusive [lo, hi] ranges; in-order adds are O(1)."""

    __slots__ = ("ranges", "sorted")

    def __init__(self, ranges: Optional[Iterable] = None):
        self.ranges: list[list[int]] = [list(r) for r in ranges or ()]
        self.sorted = False
        self.normalise()

    def add(self, value: int) -> None:
        r = self.ranges
        if r:
            last = r[-1]
            if last[0] <= value <= last[1]:
                return
            if value == last[1] + 1:
                last[1] = value
                return
            if value < last[0]:
                self.sorted = False
        r.append([value, value])

    def update(self, other: "RangeSet") -> None:
        self.ranges.extend([list(x) for x in other.ranges])
        self.sorted = False
        self.normalise()

    def normalise(self) -> "RangeSet":
        if self.sorted:
            return self
        merged: list[list[int]] = []
        for lo, hi in sorted(self.ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.ranges, self.sorted = merged, True
        return self

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.normalise().ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def max(self) -> Optional[int]:
        return self.normalise().ranges[-1][1] if self.ranges else None

    def clip(self, lo: int, hi: int) -> "RangeSet":
        return RangeSet([[max(a, lo), min(b, hi)] for a, b in self.normalise().ranges if b >= lo and a <= hi])

    def missing(self, lo: int, hi: int) -> list[list[int]]:
        """Ranges of [lo, hi] not in the set."""
        out, cursor = [], lo
        for a, b in self.normalise().ranges:
            if b < cursor:
                continue
            if a > hi:
                break
            if a > cursor:
                out.append([cursor, a - 1])
            cursor = max(cursor, b + 1)
        if cursor <= hi:
            out.append([cursor, hi])
        return out

    def minus(self, other: "RangeSet") -> "RangeSet":
        out = RangeSet()
        for a, b in self.normalise().ranges:
            for gap in other.missing(a, b):
                out.ranges.append(gap)
        out.sorted = False
        return out.normalise()

    def to_json(self) -> list[list[int]]:
        return [list(r) for r in self.normalise().ranges]


def _sort_key(f: dict) -> tuple:
    return (f["file"], f["offset"], f["entryId"])


@dataclass
class LedgerTally:
    batched: RangeSet = field(default_factory=RangeSet)  # entries with at least one batched copy
    good: RangeSet = field(default_factory=RangeSet)  # entries with a plain or empty copy
    verified: RangeSet = field(default_factory=RangeSet)  # entries with a copy whose digest verified
    failed: RangeSet = field(default_factory=RangeSet)  # entries with a copy that failed its digest or was unreadable
    copies: int = 0
    unplaced: int = 0  # damage in this ledger without an entry id
    kinds: set = field(default_factory=set)  # logs whose batch layout the batched entries decode as
    examples: list = field(default_factory=list)  # a few located findings: batched, bad digest, unreadable
    types: set = field(default_factory=set)  # digest types that verified copies (one, for a sound ledger)

    def add(self, f: Finding) -> None:
        self.copies += 1
        if f.form == BATCHED:
            self.batched.add(f.entry_id)
            if f.kind:
                self.kinds.add(f.kind)
        elif f.form in (PLAIN, EMPTY):
            self.good.add(f.entry_id)
        elif f.entry_id >= 0:
            self.failed.add(f.entry_id)
        else:
            self.unplaced += 1
        if f.digest == VERIFIED and f.form in (BATCHED, PLAIN, EMPTY):
            self.verified.add(f.entry_id)
            if f.digest_type:
                self.types.add(f.digest_type)
        if f.form in (BATCHED, BAD_DIGEST, UNREADABLE) and len(self.examples) < 4 * EXAMPLES_PER_LEDGER:
            self.examples.append(f.to_json())
            if len(self.examples) == 4 * EXAMPLES_PER_LEDGER:
                self._trim()

    def _trim(self) -> None:
        # Keep the first examples in (file, offset) order, so any merge order keeps the same ones.
        self.examples = sorted(self.examples, key=_sort_key)[:EXAMPLES_PER_LEDGER]

    def merge(self, other: "LedgerTally") -> None:
        for name in ("batched", "good", "verified", "failed"):
            getattr(self, name).update(getattr(other, name))
        self.copies += other.copies
        self.unplaced += other.unplaced
        self.kinds |= other.kinds
        self.types |= other.types
        self.examples += other.examples
        self._trim()

    def to_json(self) -> dict:
        self._trim()
        return {"b": self.batched.to_json(), "g": self.good.to_json(), "v": self.verified.to_json(),
                "f": self.failed.to_json(), "c": self.copies, "u": self.unplaced, "k": sorted(self.kinds),
                "x": self.examples, "y": sorted(self.types)}

    @classmethod
    def from_json(cls, d: dict) -> "LedgerTally":
        return cls(RangeSet(d["b"]), RangeSet(d["g"]), RangeSet(d["v"]), RangeSet(d["f"]), d["c"], d["u"],
                   set(d["k"]), list(d["x"]), set(d.get("y", ())))


@dataclass
class Tally:
    ledgers: dict = field(default_factory=dict)  # ledger id → LedgerTally
    damage: list = field(default_factory=list)  # findings that no ledger can be named for
    damage_count: int = 0

    def add(self, f: Finding) -> None:
        if f.ledger_id < 0:
            self.damage_count += 1
            if len(self.damage) < 4 * DAMAGE_EXAMPLES:
                self.damage.append(f.to_json())
            return
        t = self.ledgers.get(f.ledger_id)
        if t is None:
            t = self.ledgers[f.ledger_id] = LedgerTally()
        t.add(f)

    def merge(self, other: "Tally") -> "Tally":
        for lid, t in other.ledgers.items():
            mine = self.ledgers.get(lid)
            if mine is None:
                self.ledgers[lid] = t
            else:
                mine.merge(t)
        self.damage = sorted(self.damage + other.damage, key=_sort_key)[:DAMAGE_EXAMPLES]
        self.damage_count += other.damage_count
        return self

    def to_json(self) -> str:
        return json.dumps({"l": {str(k): v.to_json() for k, v in self.ledgers.items()},
                           "d": sorted(self.damage, key=_sort_key)[:DAMAGE_EXAMPLES], "n": self.damage_count})

    @classmethod
    def from_json(cls, text: str) -> "Tally":
        d = json.loads(text)
        return cls({int(k): LedgerTally.from_json(v) for k, v in d["l"].items()}, d["d"], d["n"])
