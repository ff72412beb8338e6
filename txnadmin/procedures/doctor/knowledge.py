"""What doctor knows without asking the target: the thresholds' defaults, Pulsar's and RocksDB's defaults and
limits, the releases that fixed known transaction bugs, and how to cite upstream.

Sources for every entry are in docs/doctor.md, which says what was verified and how.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ...durations import parse_duration_ms

PULSAR = "apache/pulsar"

# Thresholds (ms unless said otherwise): name → (default, what it bounds).
THRESHOLDS: dict[str, tuple[float, str]] = {
    "stuck-margin": (60_000, "an OPEN transaction this long past its own timeout is stuck (the broker aborts at the timeout)"),
    "ending": (60_000, "a transaction in COMMITTING/ABORTING for at least this long is stuck ending"),
    "stalled": (120_000, "a max read position behind the last entry while a transaction this old is ongoing is stalled"),
    "recovery": (300_000, "a recovery started this long ago without an end never ends"),
    "snapshot-share": (0.5, "a Single snapshot estimated above this share of maxMessageSize (a fraction, not ms)"),
    "idle": (7 * 86_400_000, "a pending-ack store whose subscription ended no transaction for this long is idle"),
}
# Pulsar's defaults where the target does not say (broker.conf).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# One aborted transaction in a Single snapshot: four Avro longs (txn id most/least, marker ledger/entry) as
# zig-zag varints, about 16 bytes for real ids. An estimate, and the evidence says so.
BYTES_PER_ABORT = 16
ENDING_STATES = ("COMMITTING", "ABORTING")
READY_STATES = {"Ready", "NoSnapshot"}  # NoSnapshot: a ready buffer that has not needed a snapshot yet

# Known transaction bugs and the releases that fixed them. ``fixed`` maps a release line (major, minor) to the first
# fixed patch release of that line; lines newer than every key are fixed, older ones are not. Where only one line is
# listed, backports to older lines were not verified: the finding says to check the line's release notes.
# ``source`` is where the fixed-in releases were read (apache/pulsar-site release-notes/versioned/pulsar-X.md).
NOTES = "https://github.com/apache/pulsar-site/blob/main/release-notes/versioned/"  # + pulsar-4.0.14.md, …
FIXED_2026 = {(4, 0): (4, 0, 14), (4, 2): (4, 2, 5), (5, 0): (5, 0, 0)}  # 2026-10-05, 2026-08-03, 2026-10-05
SOURCE_2026 = (f"release notes {NOTES}pulsar-4.0.14.md, pulsar-4.2.5.md and pulsar-5.0.0.md (pulsar-5.0.0-M2.md "
               "for the PRs merged before it)")
KNOWN_BUGS: list[dict] = [
    {"ref": 19200, "fix": 19201, "fixed": {(2, 9): (2, 9, 5), (2, 10): (2, 10, 4), (2, 11): (2, 11, 1)},
     "what": "timed-out transactions never end after a coordinator recovers (max read position frozen)",
     "source": "PR #19201's release labels"},
    {"ref": 17040, "fix": 18833, "fixed": {(2, 9): (2, 9, 5), (2, 10): (2, 10, 4), (2, 11): (2, 11, 1)},
     "what": "transaction buffer recovery blocked in the snapshot reader's readNext (transactional produce hangs)",
     "source": "PR #18833's release labels"},
    {"ref": 22943, "fix": 23189, "fixed": {(3, 0): (3, 0, 7), (3, 3): (3, 3, 2), (4, 0): (4, 0, 0)},
     "what": "high CPU from a tailing read while a transaction is ongoing (mitigated; the full fix, PR #22944, is open)",
     "source": "release notes of 3.0.7 and 3.3.2; 4.0.0 from its release date (not verified)"},
    {"ref": 23550, "fix": 23551, "fixed": {(3, 0): (3, 0, 15), (4, 0): (4, 0, 8), (4, 1): (4, 1, 2)},
     "what": "transactions stuck in COMMITTING", "source": "release notes of 3.0.15, 4.0.8 and 4.1.2"},
    {"ref": 24945, "fix": None, "fixed": {(4, 0): (4, 0, 8), (4, 1): (4, 1, 2)},
     "what": "transactional sends fail for good when they race the buffer's first snapshot",
     "source": "release notes of 4.0.8 and 4.1.2 (absent from 3.0.15 and 3.0.16)"},
    {"ref": 24401, "fix": None, "fixed": {(3, 0): (3, 0, 13), (3, 3): (3, 3, 8), (4, 0): (4, 0, 6)},
     "what": "deadlock while loading a transaction buffer snapshot (the topic never finishes loading)",
     "source": f"release notes {NOTES}pulsar-3.0.13.md, pulsar-3.3.8.md and pulsar-4.0.6.md (all 2025-07-31); 4.1 "
               "and later from their release dates"},
    {"ref": 26368, "fix": 26369, "fixed": FIXED_2026,
     "what": "a pending-ack store's replay spins forever after its ledgers were trimmed (subscribes time out)",
     "source": SOURCE_2026},
    {"ref": 26565, "fix": None, "fixed": FIXED_2026,
     "what": "queued transaction buffer snapshot writes stall", "source": SOURCE_2026},
    {"ref": 26335, "fix": None, "fixed": FIXED_2026,
     "what": "a queued transaction snapshot recovery is not cancelled when its topic closes", "source": SOURCE_2026},
    {"ref": 26431, "fix": None, "fixed": FIXED_2026,
     "what": "deleting a topic fails when its aborted-transaction snapshot cannot be cleared", "source": SOURCE_2026},
    {"ref": 26773, "fix": None, "fixed": FIXED_2026,
     "what": "the transaction admin API's checks (PR: \"Improve transaction admin checks\")", "source": SOURCE_2026},
    {"ref": 26073, "fix": None, "fixed": FIXED_2026,
     "what": "peeking messages reports transaction-uncommitted messages wrongly (X-Pulsar-txn-uncommitted)",
     "source": SOURCE_2026},
]

# The Java client could put transactional and plain messages into one batch, so messages silently gained or lost
# their transaction (PR #26547, "Keep transactional and non-transactional messages in separate batches"): the first
# fixed Java client of each line, from the client-java-4.0.14 notes, the 4.2.5 notes and the 5.0.0-M2 notes.
CLIENT_BATCH_BUG: dict[str, Any] = {"ref": 26547, "fixed": FIXED_2026,
                                    "source": f"release notes {NOTES}client-java-4.0.14.md, pulsar-4.2.5.md (Client "
                                              "section), pulsar-5.0.0-M2.md (in 5.0.0)"}
JAVA_CLIENT = re.compile(r"^Pulsar-Java-v(\d+\.\d+(?:\.\d+)?)")  # how the Java client names itself on connect

# From these releases a broker checks the transaction's participants against the client's grants (PR #26644):
# adding a partition needs produce on it, adding a subscription consume on its topic.
PARTICIPANT_CHECKS: dict[str, Any] = {"ref": 26644, "fixed": FIXED_2026,
                                      "source": f"release notes {NOTES}pulsar-4.0.14.md, pulsar-4.2.5.md, "
                                                "pulsar-5.0.0.md"}


def first_fixed(fixed: dict, version: tuple[int, int, int]) -> Optional[tuple[int, int, int]]:
    """The first release of ``version``'s line with the fix (None when that line has none)."""
    return fixed.get(version[:2])


def fixed_text(fixed: dict) -> list[str]:
    return [".".join(map(str, v)) for _, v in sorted(fixed.items())]


# Checksums an older RocksDB cannot read, with the release that introduced them (RocksDB HISTORY.md).
ROCKSDB_NEW_CHECKSUMS = {"kXXH3": "6.27.0"}
ROCKSDB_FORMAT_6 = "8.6.0"  # format_version=6 (RocksDB 9's default): unreadable before 8.6.0 (RocksDB 9.0.0 notes)
TABLE_SECTION = "TableOptions/BlockBasedTable"


def ref(number: int) -> str:
    """An upstream issue or pull request, as findings cite it."""
    return f"{PULSAR}#{number}"


def parse_thresholds(pairs: list[str]) -> dict[str, float]:
    """``name=value`` pairs over the defaults; unknown names and bad values raise ValueError naming them."""
    out = {name: default for name, (default, _) in THRESHOLDS.items()}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or name not in THRESHOLDS:
            raise ValueError(f"--threshold {pair!r}: use name=value with name one of {', '.join(THRESHOLDS)}")
        if name == "snapshot-share":
            try:
                out[name] = float(value)
            except ValueError:
                raise ValueError(f"--threshold {pair!r}: snapshot-share is a fraction, e.g. 0.5") from None
        else:  # a unit is required: a bare number meant ms here once, and means seconds or minutes elsewhere
            out[name] = float(parse_duration_ms(value, f"--threshold {name}"))
    return out


def is_fixed(version: tuple[int, int, int], fixed: dict) -> bool:
    line = version[:2]
    if line in fixed:
        return version >= fixed[line]
    return line > max(fixed)


def release(text: str) -> Optional[tuple[int, int, int]]:
    """``4.0.1`` (or ``v4.0``, ``3.3.2-SNAPSHOT``) as (major, minor, patch); None when it is no version."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None
