"""Named targets, as pulsarctl's contexts: ``txnadmin context add|use|list|show|remove``.

One JSON file (``$TXNADMIN_HOME/contexts.json``, default ``~/.txnadmin``), mode 0600 because a context may hold
auth params, written atomically (``txnadmin/_fs.py``). A context holds an admin URL, an auth plugin and its params,
and client.conf's TLS keys. ``--context NAME`` names one for a single command; the current context (``context use``)
only serves commands that need no named target (see admin/target.py for the precedence).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .protocol import TargetUnreachableError

FILE_NAME = "contexts.json"
VERSION = 1
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# client.conf's names, so a context reads like the client.conf it replaces
TLS_KEYS = ("tlsTrustCertsFilePath", "tlsAllowInsecureConnection", "tlsEnableHostnameVerification",
            "tlsCertificateFilePath", "tlsKeyFilePath")


class ContextError(TargetUnreachableError):
    """The contexts file cannot be read, or names no such context (exit 3; a bad name given is exit 2)."""


class ContextUsageError(ContextError):
    """The operator asked for something impossible: an invalid or unknown name, a name taken (exit 2; target
    resolution turns it into a TargetUsageError)."""


@dataclass
class Context:
    name: str
    url: str
    auth_plugin: Optional[str] = None
    auth_params: Optional[str] = None
    tls: dict = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url}
        if self.auth_plugin:
            out["authPlugin"] = self.auth_plugin
        if self.auth_params:
            out["authParams"] = self.auth_params
        out.update({k: v for k, v in self.tls.items() if v is not None})
        return out

    def describe(self) -> dict[str, Any]:
        """As shown to people and in ``-o json``: the auth params masked."""
        out = self.to_json()
        if self.auth_params:
            out["authParams"] = "****"
        return {"name": self.name, **out}


def contexts_file() -> Path:
    return Path(os.environ.get("TXNADMIN_HOME", Path.home() / ".txnadmin")) / FILE_NAME


def check_name(name: str) -> str:
    if not NAME_RULE.fullmatch(name or ""):
        raise ContextUsageError(f"context name {name!r}: use letters, digits, '.', '_' or '-' (at most 64, "
                                "starting with a letter or digit)")
    return name


@dataclass
class Contexts:
    """The file's content: every context by name, and the current one (or None)."""

    path: Path
    items: dict[str, Context] = field(default_factory=dict)
    current: Optional[str] = None

    def get(self, name: str) -> Context:
        if name not in self.items:
            known = ", ".join(sorted(self.items)) or "none yet; add one with `txnadmin context add NAME -u URL`"
            raise ContextUsageError(f"no context named {name!r} in {self.path} (known: {known})")
        return self.items[name]

    def save(self) -> None:
        from .._fs import atomic_write_text

        body = {"version": VERSION, "current": self.current,
                "contexts": {n: c.to_json() for n, c in sorted(self.items.items())}}
        atomic_write_text(self.path, json.dumps(body, indent=2) + "\n", mode=0o600)


def load(path: Optional[Path] = None) -> Contexts:
    """The contexts file, or an empty set when there is none. Its auth params are registered as secrets."""
    from .auth import register_secret

    path = path or contexts_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Contexts(path)
    except OSError as exc:
        raise ContextError(f"{path}: cannot read the contexts file ({exc.strerror or exc})") from None
    try:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("version") != VERSION or not isinstance(body.get("contexts"), dict):
            raise ValueError(f"not a txnadmin contexts file (version {VERSION})")
        items = {}
        for name, raw in body["contexts"].items():
            if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
                raise ValueError(f"context {name!r} has no url")
            params = raw.get("authParams")
            register_secret(params if isinstance(params, str) else None)
            items[name] = Context(name, raw["url"], _text(raw.get("authPlugin")), _text(params),
                                  {k: _text(raw.get(k)) for k in TLS_KEYS if raw.get(k) is not None})
        current = body.get("current")
        if current is not None and current not in items:
            raise ValueError(f"the current context {current!r} is not defined")
    except (ValueError, TypeError) as exc:
        raise ContextError(f"{path}: {exc}; fix or remove the file") from None
    return Contexts(path, items, current)


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)
