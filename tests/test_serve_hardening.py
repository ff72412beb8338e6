"""`txnadmin serve` (a real process) against hostile requests: always a 4xx in Pulsar's error shape, never a 500,
and credentials checked before a body is read."""

from __future__ import annotations

import socket

import httpx
import pytest

from serve_helpers import serving

V3 = "/admin/v3/transactions"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from txnadmin.engine.config import EngineConfig
    from txnadmin.engine.engine import Engine

    root = tmp_path_factory.mktemp("serve")
    config = EngineConfig()
    config.transactionCoordinatorCount = 1
    config.save(root / "engine")
    Engine(root / "engine", EngineConfig.load(root / "engine"), maintenance=False).close()
    with serving(root / "engine", root / "home") as (url, token):
        yield url, token


def _post(url, path, body: bytes, auth):
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    return httpx.post(url + path, content=body, headers=headers, timeout=10)


@pytest.mark.parametrize("body", [
    b"[" * 30_000 + b"]" * 30_000, b"\xff\xfe\x00garbage", b"1e999", b"Infinity", b"9" * 5000, b"true", b"1.5",
    b'"3"', b"null", b"-Infinity", b"NaN", b"99999999999999999999",
])
def test_bad_bodies_are_400_with_a_reason(served, body):
    url, token = served
    reply = _post(url, f"{V3}/transactionCoordinator/replicas", body, f"Bearer {token}")
    assert reply.status_code == 400, reply.text
    assert set(reply.json()) == {"reason"} and reply.json()["reason"]


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"1e999"])
def test_credentials_are_checked_before_the_body(served, body):
    url, _ = served
    reply = _post(url, f"{V3}/transactionCoordinator/replicas", body, None)
    assert reply.status_code == 401 and reply.json() == {"reason": "Unauthorized"}


def test_non_ascii_authorization_is_401_not_500(served):
    url, _ = served
    for value in ("Bearer caf\u00e9".encode("latin-1"), "Bearer \u00e9\u00e8".encode("utf-8"), b"\xff\xff"):
        reply = httpx.get(url + f"{V3}/coordinators", headers={"Authorization": value}, timeout=10)
        assert reply.status_code == 401 and reply.json() == {"reason": "Unauthorized"}


def test_an_oversized_body_is_refused_before_it_is_read(served):
    url, token = served
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST {V3}/transactionCoordinator/replicas HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
                     f"\r\nContent-Type: application/json\r\nContent-Length: {10**9}\r\n\r\n1".encode())
        head = sock.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head


@pytest.mark.parametrize("path", [f"{V3}/transactionMetadata/1e999/1", f"{V3}/transactionMetadata/{'9' * 5000}/1",
                                  f"{V3}/coordinatorInternalStats/true", f"{V3}/slowTransactions/1.5",
                                  f"{V3}/coordinatorStats?coordinatorId=Infinity"])
def test_bad_numbers_in_paths_are_400(served, path):
    url, token = served
    reply = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert reply.status_code == 400 and "must be an integer" in reply.json()["reason"]


def test_unknown_paths_keep_the_error_shape(served):
    url, token = served
    reply = httpx.get(url + "/admin/v3/nothing-here", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert reply.status_code == 404 and "reason" in reply.json()


def test_a_good_body_still_works(served):
    url, token = served
    assert _post(url, f"{V3}/transactionCoordinator/replicas", b"0", f"Bearer {token}").status_code == 406
