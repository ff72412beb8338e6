"""BookKeeper entry digests, as `DigestManager` and its subclasses compute them.

A stored entry is a 32-byte header (ledgerId, entryId, lastAddConfirmed, ledger length), the digest, then the
payload. Every type but DUMMY covers the header followed by the payload:

- CRC32C: 4 bytes, the CRC32C as a big-endian int32 (Pulsar's default ``managedLedgerDigestType``);
- CRC32: 8 bytes, ``java.util.zip.CRC32``'s value written as a big-endian long (the upper 4 bytes are zero);
- MAC: 20 bytes, HMAC-SHA1 keyed with SHA-1("mac" + ledger password);
- DUMMY: no digest at all, so nothing to verify.
"""

from __future__ import annotations

import hashlib
import hmac
import zlib
from typing import Optional

import google_crc32c

HEADER = 32
LENGTHS = {"CRC32C": 4, "CRC32": 8, "MAC": 20, "DUMMY": 0}
# Tried, strongest first, when no metadata names the type. DUMMY is never assumed: it cannot fail, so choosing it
# after a mismatch would be falling back to a weaker check.
DETECTABLE = ("MAC", "CRC32C", "CRC32")

VERIFIED, UNCHECKED, FAILED = "verified", "unchecked", "failed"


def normalise(name: Optional[str]) -> Optional[str]:
    """`digestType` as BookKeeper prints it (CRC32C, CRC32, MAC, DUMMY); HMAC is an alias some tools use."""
    if not name:
        return None
    upper = name.strip().upper()
    upper = "MAC" if upper == "HMAC" else upper
    return upper if upper in LENGTHS else None


def compute(kind: str, header: bytes, payload: bytes, password: bytes = b"") -> bytes:
    if kind == "CRC32C":
        return google_crc32c.extend(google_crc32c.value(header), payload).to_bytes(4, "big")
    if kind == "CRC32":
        return zlib.crc32(payload, zlib.crc32(header)).to_bytes(8, "big")
    if kind == "MAC":
        key = hashlib.sha1(b"mac" + password).digest()
        mac = hmac.new(key, header, hashlib.sha1)
        mac.update(payload)
        return mac.digest()
    return b""


def check(stored: bytes, kind: Optional[str], password: Optional[bytes]) -> tuple[str, Optional[str], int, str]:
    """(digest status, digest type, payload offset, detail) of one stored entry (header + digest + payload).

    With ``kind`` known (from the ledger's metadata) only that type is tried. Without it, the verifiable types
    are tried strongest first; an entry none of them verifies is FAILED, never read as DUMMY.
    """
    if len(stored) < HEADER:
        return FAILED, kind, len(stored), f"stored entry of {len(stored)} bytes is shorter than its 32-byte header"
    header = stored[:HEADER]
    if kind is not None:
        d = LENGTHS[kind]
        if len(stored) < HEADER + d:
            return FAILED, kind, len(stored), f"stored entry too short for a {kind} digest"
        if kind == "DUMMY":
            return UNCHECKED, kind, HEADER, "DUMMY digest: nothing to verify"
        if kind == "MAC" and password is None:
            return UNCHECKED, kind, HEADER + d, "MAC digest without the ledger password in the list"
        want = compute(kind, header, stored[HEADER + d:], password or b"")
        if want == stored[HEADER:HEADER + d]:
            return VERIFIED, kind, HEADER + d, ""
        return FAILED, kind, HEADER + d, f"{kind} digest mismatch"
    for candidate in DETECTABLE:
        d = LENGTHS[candidate]
        if len(stored) < HEADER + d:
            continue
        if compute(candidate, header, stored[HEADER + d:], password or b"") == stored[HEADER:HEADER + d]:
            return VERIFIED, candidate, HEADER + d, ""
    return FAILED, None, len(stored), ("no digest type verifies (no metadata names it; tried MAC with the "
                                       "empty password, CRC32C, CRC32)")
