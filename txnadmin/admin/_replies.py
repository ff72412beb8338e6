"""Reply checks: what a target's answer must be before HttpAdmin hands it on.

Each admin call states the JSON shape it needs (the table in :mod:`txnadmin.admin.endpoints`); anything else (an HTML
login page, ``[]`` for an object, ``null``, absurdly deep nesting) is a :class:`BadReplyError` naming the URL, never
a crash. Error statuses become the protocol's errors with Pulsar's reason, secrets masked
(:func:`txnadmin.admin.auth.mask`).

A shape is a type (dict, list, str, int), ``("list", item shape, non-empty?)``, ``("obj", {key: shape})`` for an
object that must hold those keys, ``("opt", {key: shape})`` for an object whose keys, when present, have those shapes, ``("map", value shape)`` for an
object of any keys whose values all have one shape
(Pulsar's spec leaves every field optional: a display command prints what came), or ``"config"`` for a broker
configuration map. Only what txnadmin reads is required; extra fields are Pulsar's business.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any, Optional

import httpx

from ._transport import Reply
from .auth import mask
from .protocol import (
    UNEXPECTED_ERROR_HEADER, AdminError, BadReplyError, NotAuthorizedError, NotFoundError, UnexpectedServerError,
)

AnyReply = httpx.Response | Reply  # httpx's, or the direct path's (same names for what is read here)
MAX_DEPTH = 64  # Pulsar's admin JSON nests a handful of levels; far deeper is garbage (and would exhaust the stack)
VERSION = re.compile(r"\d+\.\d+(\.\d+)?([.+-][0-9A-Za-z.+-]*)?$")  # a broker's version, as /brokers/version sends it


def result(response: AnyReply, shape: Any = None) -> Any:
    """The reply's JSON checked against ``shape`` (None: any JSON, or None for an empty reply), or the error the
    status stands for."""
    status = response.status_code
    where = str(response.url).partition("?")[0]  # copy_with(query=None) re-parses: 2x the cost
    if 200 <= status < 300:
        if shape is None:
            return None if status == 204 or not response.content else decode(response, where)
        if status == 204 or not response.content:
            raise BadReplyError(f"{where}: empty reply where JSON was expected")
        value = decode(response, where)
        try:
            check(value, shape, "reply")
        except ValueError as exc:
            raise BadReplyError(f"{where}: unexpected JSON ({exc})") from None
        return value
    raise error(response, where)


def error(response: AnyReply, where: str) -> AdminError:
    """The protocol's error for a reply that is not a success."""
    status = response.status_code
    reason = mask(_reason(response))
    if status in (401, 403):
        return NotAuthorizedError(f"not authorized: {reason}" if reason else "not authorized", status)
    if status == 404:
        if not _has_json_reason(response):  # not Pulsar's own "not found" but a missing path (proxy, wrong URL)
            reason = f"{where}: HTTP 404 {response.reason_phrase or 'Not Found'}"
        return NotFoundError(reason or "Not Found")
    if 300 <= status < 400:
        return BadReplyError(f"{where}: HTTP {status} redirect without a Location")
    if status == 500:  # only a 500 can carry Pulsar's plain-text report of an unmapped exception
        message = _unexpected_message(response.content.decode("utf-8", "replace").strip())
        if message is not None:
            return UnexpectedServerError(mask(" ".join(message.split())[:300]))
    return AdminError(reason or f"HTTP {status}", status)


def decode(response: AnyReply, where: str) -> Any:
    raw = response.content
    if raw.lstrip()[:1] == b"<":
        raise BadReplyError(f"malformed JSON from {where}: an HTML page, not JSON (a login page from a proxy?)")
    if not depth_ok(raw):
        raise BadReplyError(f"malformed JSON from {where}: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise BadReplyError(f"malformed JSON from {where}") from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def check(value: Any, shape: Any, where: str) -> None:
    if isinstance(shape, tuple) and shape[0] == "list":
        _, item, non_empty = shape
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {_kind(value)}")
        if non_empty and not value:
            raise ValueError(f"{where}: expected at least one entry, got an empty list")
        for i, element in enumerate(value):
            check(element, item, f"{where}[{i}]")
        return
    if isinstance(shape, tuple) and shape[0] == "map":
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {_kind(value)}")
        for key, element in value.items():
            check(element, shape[1], f"{where}[{key!r}]")
        return
    if shape == "config":  # a broker configuration map: names to plain values, never nested objects
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object of settings, got {_kind(value)}")
        for key, setting in value.items():
            if isinstance(setting, (dict, list)):
                raise ValueError(f"{where}.{key}: expected a plain setting value, got {_kind(setting)}")
        return
    if isinstance(shape, tuple) and shape[0] in ("obj", "opt"):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {_kind(value)}")
        for key, sub in shape[1].items():
            if key in value:
                check(value[key], sub, f"{where}.{key}")
            elif shape[0] == "obj":
                raise ValueError(f"{where}: no {key!r} field")
        return
    if shape is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {_kind(value)}")
        return
    if shape is dict and isinstance(value, dict) or shape is list and isinstance(value, list) \
            or shape is str and isinstance(value, str):
        return
    raise ValueError(f"{where}: expected {_kind(shape())}, got {_kind(value)}")


def depth_ok(raw: bytes) -> bool:
    """Cheap guard before json.loads: nesting deeper than MAX_DEPTH (counted on brackets outside strings)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return True
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


def retry_after(response: AnyReply) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date); None when absent or garbage."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):  # Python 3.10+ raises on garbage instead of returning None
        return None
    return max(0.0, when.timestamp() - time.time())


def _has_json_reason(response: AnyReply) -> bool:
    raw = response.content
    if not raw.lstrip().startswith(b"{") or not depth_ok(raw):
        return False
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and bool(data.get("reason"))


def _reason(response: AnyReply) -> str:
    """Pulsar's ``{"reason": …}`` or a short plain-text body, on one line; HTML pages give the status phrase."""
    raw = response.content
    text = ""
    if depth_ok(raw):
        try:
            data = json.loads(raw)
            if isinstance(data, dict) and data.get("reason"):
                text = str(data["reason"])
        except (ValueError, RecursionError):
            pass
    if not text:
        body = raw.decode("utf-8", "replace").strip()
        message = _unexpected_message(body)
        if message is not None:
            text = UnexpectedServerError(message).reason
        else:
            text = body if body and not body.startswith("<") else response.reason_phrase
    return " ".join(text.split())[:300]


def _unexpected_message(body: str) -> Optional[str]:
    """Pulsar's plain-text 500 for an exception no handler mapped (a NullPointerException, say): its ``Message:``
    without the stack trace that follows; None for any other body."""
    if not body.startswith(UNEXPECTED_ERROR_HEADER):
        return None
    message = body[len(UNEXPECTED_ERROR_HEADER):].partition("Stacktrace:")[0].strip()
    return message.removeprefix("Message:").strip()

