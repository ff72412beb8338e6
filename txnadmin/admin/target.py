"""Which Pulsar (or engine) a command talks to, and why.

Highest first: ``--admin-url/-u`` (``http(s)://host:port`` or ``local:PATH``), ``$TXNADMIN_ADMIN_URL``,
a Pulsar ``client.conf`` (``--conf``, ``$PULSAR_CLIENT_CONF`` or ``$PULSAR_HOME/conf/client.conf``:
``webServiceUrl``, ``authPlugin``, ``authParams``, TLS keys), then the embedded engine directory.

Everything but the last counts as *named* by the operator. Commands that change or judge a whole cluster
(downgrade, upgrade, batch-log changes, doctor) call :func:`require_named` so they never act on the
embedded default by accident; ``-u ""`` is always a usage error (:class:`TargetUsageError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .protocol import TargetUnreachableError, TransactionsAdmin

ENV_URL = "TXNADMIN_ADMIN_URL"
ENV_CONF = "PULSAR_CLIENT_CONF"
ENV_PULSAR_HOME = "PULSAR_HOME"
EMBEDDED_DEFAULT = "embedded default"


class TargetUsageError(TargetUnreachableError):
    """The operator's target options themselves are wrong (``-u ""``, no target named where one is required).

    A subclass of TargetUnreachableError so pulsar-admin parity commands keep answering it with exit 1;
    txnadmin's own commands answer it with exit 2 (usage error).
    """


@dataclass
class Target:
    url: str  # http(s)://… or local:PATH
    source: str  # why this target: "--admin-url", "$TXNADMIN_ADMIN_URL", "client.conf PATH via …", "embedded default"
    auth_plugin: Optional[str] = None
    auth_params: Optional[str] = None
    tls: dict = field(default_factory=dict)
    conf: Optional[str] = None  # the client.conf whose settings apply (to name the target again in a suggestion)

    @property
    def named(self) -> bool:
        """True when the operator chose this target (a flag, the environment, a client.conf)."""
        return self.source != EMBEDDED_DEFAULT

    @property
    def label(self) -> str:
        """One line for the top of human output: ``http://b:8080 (from --admin-url)``."""
        return f"{self.url} (from {self.source})"

    @property
    def is_local(self) -> bool:
        return self.url.startswith("local:")

    @property
    def engine_dir(self) -> Path:
        return Path(self.url[len("local:"):]).expanduser()

    def describe(self) -> dict:
        out: dict[str, Any] = {"target": self.url, "source": self.source}
        if self.auth_plugin:
            out["authPlugin"] = self.auth_plugin
            out["authParams"] = "****" if self.auth_params else None
        out.update({k: v for k, v in self.tls.items() if v is not None and k != "requestTimeout"})
        return out


def read_client_conf(path: Path) -> dict[str, str]:
    """Java properties as Pulsar's client.conf uses them (``key=value``, ``#``/``!`` comments)."""
    values: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TargetUnreachableError(f"{path}: cannot read client.conf ({exc.strerror or exc})") from None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min([i for i in (line.find("="), line.find(":")) if i >= 0], default=-1)
        if sep < 0:
            continue
        values[line[:sep].strip()] = line[sep + 1:].strip()
    return values


def resolve_target(admin_url: Optional[str] = None, conf: Optional[Path] = None, auth_plugin: Optional[str] = None,
                   auth_params: Optional[str] = None, tls: Optional[dict] = None) -> Target:
    """Flags win over everything; client.conf fills in what flags leave out (as pulsar-admin does)."""
    target = _resolve(admin_url, conf)
    if auth_plugin:
        target.auth_plugin = auth_plugin
    if auth_params:
        target.auth_params = auth_params
    for key, value in (tls or {}).items():
        if value is not None:
            target.tls[key] = value
    return target


def require_named(target: Target, what: str) -> Target:
    """Refuse the embedded default for ``what`` (e.g. "downgrade start") unless the operator named it.

    Returns the target; raises :class:`TargetUsageError` (exit 2) with the ways to name one.
    """
    if not target.named:
        raise TargetUsageError(
            f"{what} needs a named target and none was given: pass -u http(s)://host:port or -u local:PATH, "
            f"set ${ENV_URL}, or give a client.conf (--conf, ${ENV_CONF}, ${ENV_PULSAR_HOME}/conf/client.conf); "
            f"the embedded engine ({target.url}) is never used implicitly here")
    return target


def target_source(target: Target) -> tuple[bool, str]:
    """(named by the operator?, where it came from) — for commands such as ``doctor`` that report it."""
    return target.named, target.source


def _default_conf() -> tuple[Optional[Path], str]:
    if os.environ.get(ENV_CONF):
        return Path(os.environ[ENV_CONF]), f"${ENV_CONF}"
    if os.environ.get(ENV_PULSAR_HOME):
        candidate = Path(os.environ[ENV_PULSAR_HOME]) / "conf" / "client.conf"
        if candidate.exists():
            return candidate, f"${ENV_PULSAR_HOME}/conf/client.conf"
    return None, ""


def _resolve(admin_url: Optional[str], conf: Optional[Path]) -> Target:
    if admin_url is not None and not admin_url.strip():
        raise TargetUsageError("--admin-url is empty: give http(s)://host:port or local:PATH")
    conf_path, conf_source = (conf, "--conf") if conf else _default_conf()
    conf_values = read_client_conf(conf_path) if conf_path else {}

    def with_conf(target: Target) -> Target:
        if conf_values and not target.is_local:
            target.auth_plugin = conf_values.get("authPlugin") or None
            target.auth_params = conf_values.get("authParams") or None
            target.tls = _tls(conf_values)
            target.conf = str(conf_path)
        return target

    if admin_url:
        return with_conf(Target(_no_credentials(_normalize(admin_url), "--admin-url"), "--admin-url"))
    if os.environ.get(ENV_URL):
        return with_conf(Target(_no_credentials(_normalize(os.environ[ENV_URL]), f"${ENV_URL}"), f"${ENV_URL}"))
    if conf_path:
        url = conf_values.get("webServiceUrl") or conf_values.get("serviceUrl", "")
        if not url or not url.startswith(("http://", "https://")):
            raise TargetUnreachableError(f"{conf_path}: Can't find any admin url to use (webServiceUrl)")
        return with_conf(Target(_no_credentials(url.rstrip("/"), f"{conf_path} webServiceUrl"),
                                f"client.conf {conf_path} via {conf_source}"))
    from ..engine import default_engine_dir

    return Target(f"local:{default_engine_dir()}", EMBEDDED_DEFAULT)


def _tls(values: dict[str, str]) -> dict:
    # The last three are read by the auth plugins (admin/auth.py), not by the TLS context itself.
    keys = ("tlsTrustCertsFilePath", "tlsAllowInsecureConnection", "tlsEnableHostnameVerification",
            "useKeyStoreTls", "tlsCertificateFilePath", "tlsKeyFilePath")
    return {k: values.get(k) or None for k in keys}


def _no_credentials(url: str, where: str) -> str:
    """Refuse ``user:password@`` in an admin URL: txnadmin never sends credentials from the URL, and the URL is
    printed on every target line, so it would only leak the password while requests went out without it."""
    from urllib.parse import urlsplit

    from .auth import register_secret

    if url.startswith("local:"):
        return url
    try:
        parts = urlsplit(url)
        user, password, host = parts.username, parts.password, parts.netloc.rpartition("@")[2]
    except ValueError:
        return url  # a URL too broken to split is refused with its own message when it is opened
    if user is None and password is None:
        return url
    register_secret(password)
    raise TargetUsageError(
        f"{where}: {parts.scheme}://{user or ''}{':****' if password else ''}@{host}: credentials in the admin URL "
        "are never sent; give them to an auth plugin instead (--auth-plugin org.apache.pulsar.client.impl.auth."
        "AuthenticationBasic --auth-params '{\"userId\":\"…\",\"password\":\"…\"}', or authPlugin/authParams in "
        "client.conf)")


def _normalize(url: str) -> str:
    url = url.strip()
    if url.startswith(("http://", "https://", "local:")):
        return url.rstrip("/") if not url.startswith("local:") else url
    raise TargetUnreachableError(f"admin URL {url!r}: use http(s)://host:port or local:PATH")


def open_admin(target: Target, running_only: bool = False) -> TransactionsAdmin:
    """An admin for the target; for a local engine held by a running server, go through that server.

    ``running_only`` (the exporter): a local engine that no process serves is not opened (its read-only view would
    keep an engine from starting meanwhile) but unreachable, as a stopped broker is."""
    if target.is_local:
        server = _running_server(target.engine_dir)
        if server is None and running_only:
            raise TargetUnreachableError(
                f"{target.engine_dir}: the engine is not running (no server.json): start it with `txnadmin engine "
                "run` or `txnadmin serve`")
        if server is None:
            from .local import LocalAdmin

            return LocalAdmin(target.engine_dir, read_mostly=True)  # reads of a stopped engine change nothing
        url, token = server
        from .http import HttpAdmin

        engine_dir = target.engine_dir
        return HttpAdmin(url, token=token, rediscover=lambda: _running_server(engine_dir))
    from .http import HttpAdmin

    return HttpAdmin.from_target(target)


def _running_server(engine_dir: Path) -> Optional[tuple[str, Optional[str]]]:
    """`txnadmin serve` / `engine run` record their loopback URL in the engine dir while they hold it."""
    import json

    path = engine_dir / "server.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    pid = info.get("pid")
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return None
    return info["url"], info.get("token")
