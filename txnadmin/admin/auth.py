"""Pulsar's client authentication plugins, as `pulsar-admin` reads them from flags and client.conf.

Implemented: ``AuthenticationToken`` (``token:…``, ``file://…``, ``{"token": …}``), ``AuthenticationTls`` (a client
certificate and key), ``AuthenticationBasic`` (``{"userId", "password"}``) and ``AuthenticationOAuth2`` (the
client-credentials flow: ``issuerUrl``, ``privateKey`` file, ``audience``, ``scope``). Refused by name: Athenz, SASL,
keystore TLS (``useKeyStoreTls=true``) and any plugin we do not know — a request must never go out silently
without the credentials the operator configured.

Every secret an :class:`Auth` holds is registered with :func:`register_secret`, and everything txnadmin prints goes
through :func:`mask`, so a server that echoes our headers back cannot make us print a token.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .protocol import TargetUnreachableError

PREFIX = "org.apache.pulsar.client.impl.auth."
TOKEN, TLS, BASIC, OAUTH2 = "AuthenticationToken", "AuthenticationTls", "AuthenticationBasic", "AuthenticationOAuth2"
DISABLED = "AuthenticationDisabled"
# Pulsar plugins an operator may have configured that txnadmin does not implement (short class names).
REFUSED = {
    "AuthenticationAthenz": "Athenz",
    "AuthenticationSasl": "SASL/Kerberos",
    "AuthenticationKeyStoreTls": "keystore TLS",
}
SUPPORTED = (TOKEN, TLS, BASIC, OAUTH2)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: Optional[str]) -> None:
    """Remember a secret so :func:`mask` hides it wherever it would be printed (short values are not secrets)."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def register_params(params: Optional[str]) -> None:
    """Auth params as given on the command line are secret before any plugin parses them: an error raised before
    (or instead of) the parsing must not print them either. A ``file:`` reference is a path, not a secret."""
    if not params or params.startswith("file:"):
        return
    register_secret(params)
    if params.startswith("token:"):
        register_secret(params[len("token:"):])


def mask(text: str) -> str:
    """``text`` with every registered secret replaced by ``****`` (longest first, so a token inside
    ``Bearer <token>`` and a base64 Basic credential are both caught)."""
    if not _secrets or not text:
        return text
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, "****")
    return text


def mask_value(value: Any) -> Any:
    """``value`` (a reply: dicts, lists, strings, numbers) with :func:`mask` applied to every string in it, keys
    included — what a server sends back is printed too, and a reply echoing our headers must not show the token."""
    if not _secrets:
        return value
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {mask_value(k): mask_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v) for v in value]
    return value


class AuthError(TargetUnreachableError):
    """The configured credentials cannot be used (unreadable file, bad params, refused plugin, token endpoint)."""

    final = True  # retrying does not make credentials usable (see protocol.is_transient)


@dataclass
class Auth:
    """What a request carries: an ``Authorization`` header (maybe refreshed) and/or a TLS client certificate."""

    plugin: Optional[str] = None
    client_cert: Optional[tuple[str, str]] = None  # (certificate file, key file)

    def authorization(self, timeout: float) -> Optional[str]:
        return None


@dataclass
class TokenAuth(Auth):
    token: str = ""

    def authorization(self, timeout: float) -> Optional[str]:
        return f"Bearer {self.token}"


@dataclass
class BasicAuth(Auth):
    user: str = ""
    password: str = ""
    _header: str = ""

    def __post_init__(self) -> None:
        encoded = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        self._header = f"Basic {encoded}"
        register_secret(encoded)

    def authorization(self, timeout: float) -> Optional[str]:
        return self._header


@dataclass
class OAuth2ClientCredentials(Auth):
    """The client-credentials grant as Pulsar's ``AuthenticationOAuth2`` does it: discover the token endpoint from
    ``<issuerUrl>/.well-known/openid-configuration``, POST a form with the key file's client id and secret, and
    reuse the access token until shortly before it expires."""

    issuer_url: str = ""
    client_id: str = ""
    client_secret: str = ""
    audience: Optional[str] = None
    scope: Optional[str] = None
    verify: Any = True
    _token: Optional[str] = None
    _expires_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def authorization(self, timeout: float) -> Optional[str]:
        with self._lock:
            if self._token is None or time.monotonic() >= self._expires_at:
                self._token, lifetime = self._fetch(timeout)
                # Renew a little early so a token never expires between our check and the broker's.
                self._expires_at = time.monotonic() + max(0.0, lifetime * 0.9)
            return f"Bearer {self._token}"

    def _fetch(self, timeout: float) -> tuple[str, float]:
        import httpx

        where = f"OAuth2 issuer {self.issuer_url}"
        try:
            with httpx.Client(timeout=timeout, verify=self.verify, follow_redirects=True) as client:
                meta = client.get(self.issuer_url.rstrip("/") + "/.well-known/openid-configuration")
                if meta.status_code != 200:
                    raise AuthError(f"{where}: metadata answered HTTP {meta.status_code}")
                endpoint = _json_object(meta, where).get("token_endpoint")
                if not isinstance(endpoint, str) or not endpoint:
                    raise AuthError(f"{where}: metadata has no token_endpoint")
                form = {"grant_type": "client_credentials", "client_id": self.client_id,
                        "client_secret": self.client_secret}
                if self.audience:
                    form["audience"] = self.audience
                if self.scope:
                    form["scope"] = self.scope
                # No redirects for the POST: a 307 would re-send the client secret wherever it points.
                reply = client.post(endpoint, data=form, headers={"Accept": "application/json"},
                                    follow_redirects=False)
        except httpx.HTTPError as exc:
            raise AuthError(f"{where}: {type(exc).__name__}: {mask(str(exc))[:200]}") from None
        body = _json_object(reply, f"token endpoint {endpoint}")
        if reply.status_code != 200:
            detail = body.get("error_description") or body.get("error") or f"HTTP {reply.status_code}"
            raise AuthError(f"token endpoint {endpoint}: {mask(str(detail))[:200]}")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise AuthError(f"token endpoint {endpoint}: the reply has no access_token")
        register_secret(token)
        lifetime = body.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, (int, float)) and not isinstance(lifetime, bool) \
            else 3600.0


def _json_object(response, where: str) -> dict:
    try:
        value = response.json()
    except (ValueError, RecursionError):
        raise AuthError(f"{where}: the reply is not JSON (HTTP {response.status_code})") from None
    if not isinstance(value, dict):
        raise AuthError(f"{where}: the reply is not a JSON object")
    return value


def short_name(plugin: Optional[str]) -> Optional[str]:
    """``org.apache.pulsar.client.impl.auth.AuthenticationTls`` → ``AuthenticationTls`` (any package)."""
    if not plugin:
        return None
    return plugin.strip().rsplit(".", 1)[-1]


def _read(path_text: str, what: str) -> str:
    path = path_text[len("file://"):] if path_text.startswith("file://") else path_text
    path = path[len("file:"):] if path.startswith("file:") else path
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise AuthError(f"{what} {path}: cannot read ({reason})") from None


def _params(params: Optional[str], plugin: str) -> dict[str, str]:
    """Pulsar's two encodings of authParams: a JSON object, or ``key1:value1,key2:value2``."""
    text = (params or "").strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise AuthError(f"authParams for {plugin}: not valid JSON") from None
        if not isinstance(value, dict):
            raise AuthError(f"authParams for {plugin}: expected a JSON object")
        return {str(k): str(v) for k, v in value.items() if v is not None}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if not sep:
            raise AuthError(f"authParams for {plugin}: expected key:value pairs separated by commas")
        out[key.strip()] = value.strip()
    return out


def token_from_params(params: Optional[str]) -> Optional[str]:
    """AuthenticationToken params: ``token:XYZ``, ``file:///path``, ``{"token": "…"}`` or the bare token."""
    text = (params or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise AuthError("authParams: not valid JSON") from None
        if not isinstance(value, dict):
            raise AuthError("authParams: expected a JSON object with a token")
        text = str(value.get("token") or "").strip()
        if not text:
            return None
    if text.startswith("token:"):
        return text[len("token:"):].strip() or None
    if text.startswith("file:"):
        return _read(text, "token file").strip() or None
    return text


def auth_from(plugin: Optional[str], params: Optional[str], settings: Optional[dict] = None) -> Auth:
    """The :class:`Auth` for a plugin name and its params; ``settings`` are client.conf's TLS keys
    (``useKeyStoreTls``, ``tlsCertificateFilePath``/``tlsKeyFilePath``, trust settings for the OAuth2 issuer).

    Raises :class:`AuthError` for plugins txnadmin does not implement — never falls back to no credentials.
    """
    settings = settings or {}
    if str(settings.get("useKeyStoreTls") or "false").lower() == "true":
        raise AuthError("useKeyStoreTls=true: keystore TLS (JKS/PKCS12) is not supported by txnadmin; "
                        "use PEM files (tlsTrustCertsFilePath, and AuthenticationTls with tlsCertFile/tlsKeyFile)")
    name = short_name(plugin)
    if name in REFUSED:
        raise AuthError(f"authPlugin {plugin}: {REFUSED[name]} authentication is not supported by txnadmin; "
                        f"supported: {', '.join(SUPPORTED)}")
    if name is None or name == DISABLED:
        if name is None and params:
            # pulsar-admin needs the plugin; a bare token in --auth-params was accepted before, keep it working.
            token = token_from_params(params)
            register_secret(token)
            return TokenAuth(plugin=None, token=token) if token else Auth()
        return Auth(plugin=plugin)
    if name == TOKEN:
        token = token_from_params(params)
        if not token:
            raise AuthError(f"authPlugin {plugin}: authParams hold no token (token:XYZ or file:///path)")
        register_secret(token)
        return TokenAuth(plugin=plugin, token=token)
    if name == TLS:
        values = _params(params, name)
        cert = values.get("tlsCertFile") or settings.get("tlsCertificateFilePath")
        key = values.get("tlsKeyFile") or settings.get("tlsKeyFilePath")
        if not cert or not key:
            raise AuthError(f"authPlugin {plugin}: authParams need tlsCertFile and tlsKeyFile "
                            "(e.g. tlsCertFile:/path/client.cert.pem,tlsKeyFile:/path/client.key-pk8.pem)")
        cert, key = _strip_file(cert), _strip_file(key)
        check_client_cert(cert, key)
        return Auth(plugin=plugin, client_cert=(cert, key))
    if name == BASIC:
        values = _params(params, name)
        user, password = values.get("userId"), values.get("password")
        if not user or password is None:
            raise AuthError(f'authPlugin {plugin}: authParams need userId and password ({{"userId":…,"password":…}})')
        register_secret(password)
        return BasicAuth(plugin=plugin, user=user, password=password)
    if name == OAUTH2:
        return _oauth2(plugin, _params(params, name), settings)
    raise AuthError(f"authPlugin {plugin}: unknown authentication plugin; supported: {', '.join(SUPPORTED)}")


def _strip_file(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def check_client_cert(cert: str, key: str) -> None:
    """Load the pair once now, so a wrong path or a key that does not match fails here with the file names."""
    for path, what in ((cert, "tlsCertFile"), (key, "tlsKeyFile")):
        if not Path(path).is_file():
            raise AuthError(f"{what} {path}: not a readable file")
    try:
        ssl.create_default_context().load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise AuthError(f"tlsCertFile {cert} / tlsKeyFile {key}: not a PEM certificate and matching key "
                        f"({getattr(exc, 'reason', None) or exc})") from None


def _oauth2(plugin: Optional[str], values: dict[str, str], settings: dict) -> OAuth2ClientCredentials:
    kind = values.get("type", "client_credentials")
    if kind != "client_credentials":
        raise AuthError(f"authPlugin {plugin}: flow type {kind!r} is not supported (only client_credentials)")
    issuer = values.get("issuerUrl")
    private_key = values.get("privateKey")
    if not issuer or not private_key:
        raise AuthError(f"authPlugin {plugin}: authParams need issuerUrl and privateKey "
                        '({"issuerUrl":…,"privateKey":"file:///path/key.json","audience":…})')
    if private_key.startswith("data:"):
        header, _, data = private_key.partition(",")
        try:
            text = base64.b64decode(data).decode() if ";base64" in header else data
        except (ValueError, UnicodeDecodeError):
            raise AuthError(f"authPlugin {plugin}: privateKey data URL is not valid base64") from None
    else:
        text = _read(private_key, "OAuth2 privateKey file")
    try:
        key = json.loads(text)
    except (ValueError, RecursionError):
        raise AuthError(f"OAuth2 privateKey {private_key}: not a JSON key file") from None
    if not isinstance(key, dict) or not key.get("client_id") or not key.get("client_secret"):
        raise AuthError(f"OAuth2 privateKey {private_key}: needs client_id and client_secret")
    register_secret(str(key["client_secret"]))
    trust = settings.get("tlsTrustCertsFilePath")
    return OAuth2ClientCredentials(plugin=plugin, issuer_url=issuer, client_id=str(key["client_id"]),
                                   client_secret=str(key["client_secret"]), audience=values.get("audience"),
                                   scope=values.get("scope"), verify=trust or True)
