"""Which Pulsar (or engine) a command talks to, and why.

Highest first (docs/transactions.md, "Naming the target"):

1. ``--admin-url/-u`` (``http(s)://host:port`` or ``local:PATH``); a client.conf, when one is given or set in the
   environment, adds its auth and TLS settings;
2. ``--conf client.conf`` (``webServiceUrl``, ``authPlugin``, ``authParams``, TLS keys);
3. ``--context NAME`` (a context kept by ``txnadmin context add``); not together with 1 or 2;
4. ``$TXNADMIN_ADMIN_URL``;
5. ``$PULSAR_CLIENT_CONF``, else ``$PULSAR_HOME/conf/client.conf``;
6. the current context (``txnadmin context use NAME``);
7. the embedded engine directory.

1–5 count as *named* by the operator; 6 and 7 are implicit. Commands that change or judge a whole cluster
(downgrade, upgrade, batch-log changes, abort-transaction, doctor) call :func:`require_named` so they never act
on an implicit target by accident; ``-u ""`` is always a usage error (:class:`TargetUsageError`).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .protocol import TargetUnreachableError, TransactionsAdmin

ENV_URL = "TXNADMIN_ADMIN_URL"
ENV_CONF = "PULSAR_CLIENT_CONF"
ENV_PULSAR_HOME = "PULSAR_HOME"
EMBEDDED_DEFAULT = "embedded default"
CURRENT_CONTEXT = "current context"  # the start of the source of a target taken from `txnadmin context use`
# The commands whose suggested command lines must carry the target (the others take no target).
TARGETED_COMMANDS = ("transactions", "txn", "downgrade", "doctor", "upgrade", "target")


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
    again: list = field(default_factory=list)  # the options that name this target again (never a secret)
    context: Optional[str] = None  # the context it came from
    unreadable: Optional[str] = None  # why its credentials cannot be read (only with resolve_target(lenient=True))

    @property
    def named(self) -> bool:
        """True when the operator chose this target (a flag, the environment, a client.conf), not when it is the
        current context or the embedded default."""
        return self.source != EMBEDDED_DEFAULT and not self.source.startswith(CURRENT_CONTEXT)

    @property
    def on_command_line(self) -> bool:
        """Named by this command's own options (-u, --conf, --context), not by the environment or a default."""
        return self.source in ("--admin-url", "--context " + str(self.context)) or self.source.endswith("via --conf")

    def command(self, words: str, *more: str) -> str:
        """A command line to paste: ``txnadmin <the options naming this target> words more…``."""
        return " ".join(["txnadmin", *(shlex.quote(a) for a in self.again), words, *(shlex.quote(m) for m in more)])

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
                   auth_params: Optional[str] = None, tls: Optional[dict] = None,
                   context: Optional[str] = None, lenient: bool = False) -> Target:
    """Flags win over everything; client.conf or the context fills in what flags leave out (as pulsar-admin does).

    ``lenient`` (for showing the target): a client.conf that cannot be read but only adds credentials to a URL
    named otherwise is recorded in ``unreadable`` instead of raising."""
    target = _resolve(admin_url, conf, context, lenient)
    if auth_plugin:
        target.auth_plugin = auth_plugin
        target.again += ["--auth-plugin", auth_plugin]
    if auth_params:
        target.auth_params = auth_params
        # a file: reference names where the secret is, not the secret: it pastes as it is
        target.again += ["--auth-params", auth_params if auth_params.startswith("file:") else "<your auth params>"]
    flags = {"tlsTrustCertsFilePath": "--tls-trust-cert-path", "tlsAllowInsecureConnection": "--tls-allow-insecure",
             "tlsEnableHostnameVerification": "--tls-enable-hostname-verification"}
    for key, value in (tls or {}).items():
        if value is not None:
            target.tls[key] = value
            if key == "tlsTrustCertsFilePath":
                target.again += [flags[key], value]
            elif key in flags and value == "true":
                target.again.append(flags[key])
    return target


_SUGGESTED = re.compile(r"\btxnadmin ((?:%s)\b(?: (?:start|wait|status|verify|reset)\b(?! --state))?)"
                        % "|".join(TARGETED_COMMANDS))


def retarget(text: str, target: Target, state_flags: tuple = ()) -> str:
    """``text`` with every suggested ``txnadmin <command>`` naming ``target`` again, and a downgrade step its
    checklist (``state_flags``, e.g. ``("--state", "s.json")``): pasted, it acts on what this command acted on."""

    def named(match: re.Match) -> str:
        words = match.group(1)
        extra = state_flags if words.startswith("downgrade ") else ()
        return target.command(words, *extra)

    return _SUGGESTED.sub(named, text)


def require_named(target: Target, what: str) -> Target:
    """Refuse the embedded default for ``what`` (e.g. "downgrade start") unless the operator named it.

    Returns the target; raises :class:`TargetUsageError` (exit 2) with the ways to name one.
    """
    if not target.named:
        implicit = (f"the current context {target.context!r} ({target.url}) names no target for it: pass "
                    f"--context {target.context} to use it" if target.context else
                    f"the embedded engine ({target.url}) is never used implicitly here")
        raise TargetUsageError(
            f"{what} needs a named target and none was given: pass -u http(s)://host:port or -u local:PATH, "
            f"--context NAME, set ${ENV_URL}, or give a client.conf (--conf, ${ENV_CONF}, "
            f"${ENV_PULSAR_HOME}/conf/client.conf); {implicit}")
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


def _resolve(admin_url: Optional[str], conf: Optional[Path], context: Optional[str], lenient: bool = False) -> Target:
    if admin_url is not None and not admin_url.strip():
        raise TargetUsageError("--admin-url is empty: give http(s)://host:port or local:PATH")
    if context is not None and (admin_url or conf):
        raise TargetUsageError(f"--context {context} and {'-u' if admin_url else '--conf'} both name a target; "
                               "give one of them")
    if context is not None:
        return _from_context(context, f"--context {context}")
    conf_path, conf_source = (conf, "--conf") if conf else _default_conf()
    unreadable = None
    try:
        conf_values = read_client_conf(conf_path) if conf_path else {}
    except TargetUnreachableError as exc:
        if not (lenient and (admin_url or os.environ.get(ENV_URL))):
            raise
        conf_values, unreadable = {}, exc.reason

    def with_conf(target: Target, again: list) -> Target:
        target.again, target.unreadable = again, unreadable
        if unreadable:
            target.conf = str(conf_path)
            target.again = again + ["--conf", str(conf_path)]
        if conf_values and not target.is_local:
            target.auth_plugin = conf_values.get("authPlugin") or None
            target.auth_params = conf_values.get("authParams") or None
            target.tls = _tls(conf_values)
            target.conf = str(conf_path)
            if not again or again[0] != "--conf":
                target.again = again + ["--conf", str(conf_path)]  # its credentials and TLS settings
        return target

    if admin_url:
        url = _no_credentials(_normalize(admin_url), "--admin-url")
        return with_conf(Target(url, "--admin-url"), ["-u", url])
    if os.environ.get(ENV_URL):
        url = _no_credentials(_normalize(os.environ[ENV_URL]), f"${ENV_URL}")
        return with_conf(Target(url, f"${ENV_URL}"), ["-u", url])
    if conf_path:
        url = conf_values.get("webServiceUrl") or conf_values.get("serviceUrl", "")
        if not url or not url.startswith(("http://", "https://")):
            raise TargetUnreachableError(f"{conf_path}: Can't find any admin url to use (webServiceUrl)")
        return with_conf(Target(_no_credentials(url.rstrip("/"), f"{conf_path} webServiceUrl"),
                                f"client.conf {conf_path} via {conf_source}"), ["--conf", str(conf_path)])
    from .contexts import load

    current = load().current
    if current is not None:
        return _from_context(current, f"{CURRENT_CONTEXT} {current} (txnadmin context use)")
    from ..engine import default_engine_dir

    url = f"local:{default_engine_dir()}"
    return Target(url, EMBEDDED_DEFAULT, again=["-u", url])


def _from_context(name: str, source: str) -> Target:
    from .contexts import ContextUsageError, check_name, load

    try:
        ctx = load().get(check_name(name))
    except ContextUsageError as exc:
        raise TargetUsageError(exc.reason) from None  # a name that does not exist is the operator's to fix (exit 2)
    url = _no_credentials(_normalize(ctx.url), f"context {name}")
    target = Target(url, source, again=["--context", name], context=name)
    if not target.is_local:
        target.auth_plugin, target.auth_params = ctx.auth_plugin, ctx.auth_params
        target.tls = dict(ctx.tls)
    return target


def check_admin_url(url: str, where: str) -> str:
    """``url`` as -u takes it (http(s)://host:port or local:PATH, no credentials in it), normalized."""
    if not url.strip():
        raise TargetUsageError(f"{where} is empty: give http(s)://host:port or local:PATH")
    return _no_credentials(_normalize(url), where)


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
    # what the operator typed is not an admin URL: a usage error, like -u "" (nothing was tried)
    raise TargetUsageError(f"admin URL {url!r}: use http(s)://host:port or local:PATH")


def open_admin(target: Target, running_only: bool = False) -> TransactionsAdmin:
    """An admin for the target; for a local engine held by a running server, go through that server.

    ``running_only`` (the exporter): a local engine that no process serves is not opened (its read-only view would
    keep an engine from starting meanwhile) but unreachable, as a stopped broker is."""
    if target.is_local:
        missing = missing_engine(target)
        if missing is not None and target.source == EMBEDDED_DEFAULT:
            raise TargetUnreachableError(missing)
        from .local import running_server

        server = running_server(target.engine_dir)
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
        return HttpAdmin(url, token=token, rediscover=lambda: running_server(engine_dir))
    from .http import HttpAdmin

    return HttpAdmin.from_target(target)


def missing_engine(target: Target) -> Optional[str]:
    """Why a local target has nothing to open: no engine in its directory (None when it is not local or has one).
    For the embedded default, how to name a cluster comes first: that is what an operator there most likely meant."""
    if not target.is_local or (target.engine_dir / "metadata.db").exists():
        return None
    if target.source == EMBEDDED_DEFAULT:
        return (f"no cluster named and no engine at {target.engine_dir}: name a cluster with -u http(s)://host:port, "
                f"--conf client.conf, ${ENV_CONF} or --context NAME; or create the engine with "
                f"`txnadmin engine init {target.engine_dir}`")
    return f"{target.engine_dir}: no engine here (create one with `txnadmin engine init {target.engine_dir}`)"
