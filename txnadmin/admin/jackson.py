"""Output exactly as pulsar-admin prints it: Jackson's default pretty printer and Lombok's toString."""

from __future__ import annotations

import json
from typing import Any


def pretty(value: Any) -> str:
    """Jackson ``writerWithDefaultPrettyPrinter()``: ``"key" : value``, 2-space indent per object level,
    arrays inline as ``[ a, b ]`` with objects opening on the same line, ``{ }`` and ``[ ]`` when empty."""
    return _write(value, 0)


def _write(value: Any, nesting: int) -> str:
    if isinstance(value, dict):
        if not value:
            return "{ }"
        inner = "  " * (nesting + 1)
        fields = [f'{inner}{_string(str(k))} : {_write(v, nesting + 1)}' for k, v in value.items() if v is not None]
        if not fields:
            return "{ }"
        return "{\n" + ",\n".join(fields) + "\n" + "  " * nesting + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(_write(v, nesting) for v in value) + " ]"
    return _scalar(value)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return _string(str(value))


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# Field order of the Java classes, so Lombok's toString reads as pulsar-admin prints it.
LOMBOK_FIELDS = {
    "TransactionCoordinatorStats": ["state", "leastSigBits", "lowWaterMark", "ongoingTxnSize", "recoverStartTime",
                                    "recoverEndTime"],
    "TransactionMetadata": ["txnId", "status", "openTimestamp", "timeoutAt", "producedPartitions", "ackedPartitions",
                            "owner"],
    "TransactionInBufferStats": ["startPosition", "aborted"],
    "TransactionInPendingAckStats": ["cumulativeAckPosition"],
}


def lombok(class_name: str, value: dict) -> str:
    """``ClassName(field=value, …)`` with Java's Map/List toString for nested values."""
    names = LOMBOK_FIELDS.get(class_name, list(value))
    return f"{class_name}(" + ", ".join(f"{n}={_java(value.get(n), n)}" for n in names) + ")"


def _java(value: Any, field: str = "") -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        if field == "producedPartitions":
            return "{" + ", ".join(f"{k}={lombok('TransactionInBufferStats', v)}" for k, v in value.items()) + "}"
        if field == "ackedPartitions":
            return "{" + ", ".join(
                f"{k}={{" + ", ".join(f"{s}={lombok('TransactionInPendingAckStats', st)}" for s, st in subs.items())
                + "}" for k, subs in value.items()) + "}"
        return "{" + ", ".join(f"{k}={_java(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_java(v) for v in value) + "]"
    return str(value)


def map_lines(result: dict, class_name: str | None = None) -> str:
    """A Map result as pulsar-admin prints it: one ``key + "    " + value.toString()`` line per entry."""
    lines = []
    for key, value in result.items():
        text = lombok(class_name, value) if class_name and isinstance(value, dict) else _java(value)
        lines.append(f"{key}    {text}")
    return "\n".join(lines)
