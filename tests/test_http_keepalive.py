"""HttpAdmin's plain-http keep-alive path (``_KeepAliveTransport``) against a raw loopback server that keeps
connections open, closes them behind the client's back, cuts bodies short and sends chunked ones."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnadmin.admin import _transport
from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import AdminError

SECRET = "keepalive-token"


class KeepAliveServer:
    """HTTP/1.1 on 127.0.0.1 serving many requests per connection; ``reply(n)`` gives the raw bytes of the n-th
    reply (counted over all connections) and whether to close the connection after it."""

    def __init__(self, reply):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.closed = threading.Semaphore(0)  # released as each connection is closed by the server
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            self._exchange(conn)
        finally:
            self.closed.release()

    def _heads(self, conn):
        """Each request head read from ``conn`` (recorded in ``requests``), until the client closes."""
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            head, data = data.split(b"\r\n\r\n", 1)
            self.requests.append(head.decode())
            yield head

    def _exchange(self, conn):
        with conn:
            for _ in self._heads(conn):
                payload, close = self.reply(len(self.requests))
                conn.sendall(payload)
                if close:
                    return

    def close(self):
        self.sock.close()


def ok(body: str = "[]") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()


@pytest.fixture
def serve():
    """``serve(reply)`` starts a KeepAliveServer (``kind=`` another class of it); all are closed after the test."""
    servers = []

    def start(reply, kind=None):
        servers.append((kind or KeepAliveServer)(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_calls_share_one_connection_and_send_the_credentials(serve):
    server = serve(lambda n: (ok(), False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        for _ in range(5):
            assert admin.list_coordinators() == []
    assert server.connections == 1 and len(server.requests) == 5
    assert all(f"Authorization: Bearer {SECRET}" in r and "Accept: application/json" in r for r in server.requests)
    assert all(r.startswith("GET /admin/v3/transactions/coordinators HTTP/1.1") for r in server.requests)


def test_a_connection_the_server_closed_while_idle_is_replaced_not_reported(serve):
    server = serve(lambda n: (ok(), True))  # closes after every reply, without saying `Connection: close`
    with HttpAdmin(server.url, token=SECRET) as admin:
        for _ in range(3):
            assert admin.list_coordinators() == []
    assert server.connections == 3 and len(server.requests) == 3


def test_a_body_cut_short_is_a_one_line_error_and_the_next_call_reconnects(serve):
    def reply(n):
        if n <= 3:  # every attempt of the first call (the retry policy tries a GET 3 times)
            return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[1,", True
        return ok(), False

    server = serve(reply)
    with HttpAdmin(server.url, token=SECRET, retry_backoff=0.01) as admin:
        with pytest.raises(AdminError) as err:
            admin.list_coordinators()
        assert "connection failed" in str(err.value) and "\n" not in str(err.value)
        assert admin.list_coordinators() == []


def test_chunked_bodies_and_a_204_keep_the_connection(serve):
    chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"1\r\n[\r\n1\r\n]\r\n0\r\n\r\n")
    replies = [chunked, b"HTTP/1.1 204 No Content\r\n\r\n", ok('["a"]')]
    server = serve(lambda n: (replies[n - 1], False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        assert admin.list_coordinators() == []
        admin.delete_dynamic_config("x")  # 204: no body
        assert admin.list_clusters() == ["a"]
    assert server.connections == 1


def test_a_post_body_is_sent_with_its_length(serve):
    server = serve(lambda n: (b"HTTP/1.1 204 No Content\r\n\r\n", False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        admin.scale_coordinators(3)
    assert "Content-Length: 1" in server.requests[0] and "Content-Type: application/json" in server.requests[0]


@pytest.mark.parametrize("garbage, said", [
    (b"GARBAGE LINE\r\n\r\n", "illegal status line: 'GARBAGE LINE'"),
    (b'[0,1,2]', "illegal status line: '[0,1,2]'"),  # a bare body, no status line at all
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "header line"),
])
def test_a_reply_that_is_not_http_says_what_was_wrong_in_one_line(serve, garbage, said):
    """The server's bytes are quoted as what they are (a bad status line), not passed off as a reason it gave."""
    server = serve(lambda n: (garbage, True))
    with HttpAdmin(server.url, token=SECRET, retry_backoff=0.01) as admin:
        with pytest.raises(AdminError) as err:
            admin.list_coordinators()
    message = str(err.value)
    assert message.startswith(f"{server.url}: connection failed (") and said in message and "\n" not in message


def test_a_post_on_a_connection_the_server_closed_is_never_sent_twice(serve):
    """A GET may be sent again when its reused connection turns out closed; anything else is checked before it is
    sent, so the server sees the POST exactly once."""
    server = serve(lambda n: (ok() if n == 1 else b"HTTP/1.1 204 No Content\r\n\r\n", True))
    with HttpAdmin(server.url, token=SECRET) as admin:
        assert admin.list_coordinators() == []
        # Closed before the POST, not while it is sent (that race no client can win without sending it twice).
        assert server.closed.acquire(timeout=10)
        admin.scale_coordinators(3)
    assert [r.split(" ", 1)[0] for r in server.requests] == ["GET", "POST"]


class ResetsSecondRequest(KeepAliveServer):
    """Answers the first request on each connection and resets (RST, no reply) any further one: a server whose
    idle timer fired just as the next request arrived, the race a poll before sending cannot see."""

    def _exchange(self, conn):
        with conn:
            for served, head in enumerate(self._heads(conn)):
                if served:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                conn.sendall(ok() if head.startswith(b"GET") else b"HTTP/1.1 204 No Content\r\n\r\n")


def test_a_post_after_an_idle_pause_goes_on_a_new_connection(monkeypatch):
    """CI once failed here: a POST sent 5 s after the last call met uvicorn's keep-alive timer and was reset,
    leaving no way to tell whether it was applied. After WRITE_REUSE_IDLE a write does not reuse the connection."""
    monkeypatch.setattr(_transport, "WRITE_REUSE_IDLE", 0.05)
    server = ResetsSecondRequest(lambda n: (b"", True))
    try:
        with HttpAdmin(server.url, token=SECRET) as admin:
            assert admin.list_coordinators() == []
            time.sleep(0.2)
            admin.scale_coordinators(3)
        assert [r.split(" ", 1)[0] for r in server.requests] == ["GET", "POST"] and server.connections == 2
    finally:
        server.close()


def test_writes_in_a_burst_share_the_connection(serve):
    server = serve(lambda n: (b"HTTP/1.1 204 No Content\r\n\r\n", False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        for _ in range(3):
            admin.scale_coordinators(3)
    assert len(server.requests) == 3 and server.connections == 1


def test_a_server_that_closes_without_replying_is_an_error_after_the_retries_not_a_loop(serve):
    server = serve(lambda n: (b"", True))  # reads the request, closes without a byte
    with HttpAdmin(server.url, token=SECRET, retry_backoff=0.01) as admin:
        with pytest.raises(AdminError) as err:
            admin.list_coordinators()
    assert "Remote end closed connection without response" in str(err.value) and "\n" not in str(err.value)
    assert len(server.requests) == 3  # the retry policy's three attempts, each on a fresh connection


def test_a_header_that_would_split_the_request_is_refused_before_sending(serve):
    server = serve(lambda n: (ok(), False))
    with HttpAdmin(server.url, token="abc\r\nX-Injected: yes") as admin:
        with pytest.raises(AdminError) as err:
            admin.list_coordinators()
    assert "Invalid header value for 'Authorization'" in str(err.value) and "X-Injected" not in str(err.value)
    assert server.requests == []


def test_bytes_after_a_whole_reply_keep_the_reply_and_drop_the_connection(serve):
    server = serve(lambda n: (ok('["a"]') + b"GARBAGE" if n == 1 else ok('["b"]'), False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        assert admin.list_clusters() == ["a"]
        assert admin.list_clusters() == ["b"]
    assert server.connections == 2


def test_a_reply_without_a_length_runs_until_the_close_and_an_interim_reply_is_skipped(serve):
    replies = [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[\"a\"]",
               b"HTTP/1.1 100 Continue\r\n\r\n" + ok('["b"]')]
    server = serve(lambda n: (replies[n - 1], n == 1))
    with HttpAdmin(server.url, token=SECRET) as admin:
        assert admin.list_clusters() == ["a"]
        assert admin.list_clusters() == ["b"]
    assert server.connections == 2


def test_too_many_headers_is_a_one_line_error(serve):
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"Content-Length: 2\r\n\r\n[]"
    server = serve(lambda n: (head, True))
    with HttpAdmin(server.url, token=SECRET, retry_backoff=0.01) as admin:
        with pytest.raises(AdminError) as err:
            admin.list_coordinators()
    assert "got more than 100 headers" in str(err.value) and "\n" not in str(err.value)


def test_a_reply_that_never_comes_times_out_within_the_request_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepted by the kernel, never answered
    try:
        with HttpAdmin(f"http://127.0.0.1:{listener.getsockname()[1]}", token=SECRET, timeout=0.6) as admin:
            with pytest.raises(AdminError) as err:
                admin.list_coordinators()
    finally:
        listener.close()
    assert "no answer within --request-timeout 0.6 s" in str(err.value)  # the deadline ended it, not a default


def test_a_base_url_with_a_path_keeps_it_and_the_host_header_names_the_target(serve):
    server = serve(lambda n: (ok(), False))
    with HttpAdmin(f"{server.url}/pulsar-admin/", token=SECRET) as admin:
        assert admin.list_coordinators() == []
        admin.metrics_text()
    first, second = server.requests
    assert first.startswith("GET /pulsar-admin/admin/v3/transactions/coordinators HTTP/1.1\r\n")
    assert second.startswith("GET /pulsar-admin/metrics/ HTTP/1.1\r\n")
    assert f"\r\nHost: {server.url.removeprefix('http://')}\r\n" in first


def test_a_redirect_from_the_first_hop_is_followed_with_the_same_rules(serve):
    target = serve(lambda n: (ok('["moved"]'), False))
    front = serve(lambda n: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target.url}/admin/v2/clusters\r\n"
                             "Content-Length: 0\r\n\r\n".encode(), False))
    with HttpAdmin(front.url, token=SECRET) as admin:
        assert admin.list_clusters() == ["moved"]
    assert f"Authorization: Bearer {SECRET}" in target.requests[0]  # same host: credentials go along


def test_a_text_reply_is_decoded_by_its_charset(serve):
    body = "# HELP x caf\u00e9\n".encode("latin-1")
    server = serve(lambda n: (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=ISO-8859-1\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body, False))
    with HttpAdmin(server.url, token=SECRET) as admin:
        assert admin.metrics_text() == "# HELP x caf\u00e9\n"


_HEADS = st.sampled_from([b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 404 Not Found\r\n", b"HTTP/1.0 200 OK\r\n",
                          b"HTTP/1.1 307 Temporary Redirect\r\n", b"HTTP/1.1 100 Continue\r\n\r\n", b""])
_FIELDS = st.lists(st.sampled_from([b"Content-Length: 2\r\n", b"Content-Length: -1\r\n", b"Content-Length: 99\r\n",
                                    b"Transfer-Encoding: chunked\r\n", b"Connection: close\r\n",
                                    b"Location: http://elsewhere.invalid/x\r\n", b"Content-Type: application/json\r\n",
                                    b"X: \x00\xff\r\n"]), max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=_HEADS, fields=_FIELDS, tail=st.sampled_from([b"\r\n", b"", b"\r\n\r\n"]), body=st.binary(max_size=40),
       close=st.booleans())
def test_any_reply_is_a_value_or_one_line_error(serve, head, fields, tail, body, close):
    """Whatever bytes come back, a call returns the checked value or raises the protocol's one-line error."""
    payload = head + b"".join(fields) + tail + body
    server = serve(lambda n: (payload, close))
    with HttpAdmin(server.url, token=SECRET, timeout=0.1, retry_backoff=0.01) as admin:  # a short body waits it out
        try:
            assert isinstance(admin.list_coordinators(), list)
        except AdminError as exc:
            assert "\n" not in str(exc) and SECRET not in str(exc)


def test_a_first_hop_redirect_to_a_host_outside_the_cluster_is_refused_and_gets_nothing(serve):
    """The direct first hop hands its redirect to the same rules: another host that is not an active broker is
    refused, and no byte (let alone the token) goes there."""
    elsewhere = serve(lambda n: (ok('["stolen"]'), False))
    port = elsewhere.url.rsplit(":", 1)[1]
    front = serve(lambda n: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{port}/admin/v2/clusters"
                             "\r\nContent-Length: 0\r\n\r\n".encode(), False))
    with HttpAdmin(front.url, token=SECRET) as admin:
        with pytest.raises(AdminError) as err:
            admin.list_clusters()
    assert "refusing a redirect to http://localhost:" in str(err.value) and SECRET not in str(err.value)
    assert elsewhere.requests == []


def test_calls_redirected_to_another_broker_keep_a_connection_to_each(serve):
    """On a cluster most calls enter at one broker and are redirected to the owner: neither connection is closed for
    the other, so five redirected calls are two connections, not ten."""
    owner = serve(lambda n: (ok('["owned"]'), False))
    front = serve(lambda n: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {owner.url}/admin/v2/clusters\r\n"
                             "Content-Length: 0\r\n\r\n".encode(), False))
    with HttpAdmin(front.url, token=SECRET) as admin:
        for _ in range(5):
            assert admin.list_clusters() == ["owned"]
    assert (front.connections, len(front.requests)) == (1, 5)
    assert (owner.connections, len(owner.requests)) == (1, 5)


def test_an_idle_connection_to_the_owner_the_server_closed_meanwhile_is_replaced(serve):
    owner = serve(lambda n: (ok('["owned"]'), True))  # closes after every reply, without saying so
    front = serve(lambda n: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {owner.url}/admin/v2/clusters\r\n"
                             "Content-Length: 0\r\n\r\n".encode(), False))
    with HttpAdmin(front.url, token=SECRET) as admin:
        for _ in range(3):
            assert admin.list_clusters() == ["owned"]
    assert (front.connections, owner.connections, len(owner.requests)) == (1, 3, 3)


def to_owner(owner_url: str, authoritative: str = "false"):
    """A broker that owns nothing: every call is sent on to ``owner_url`` as Pulsar's validateTopicOwnership does (same
    path and query, ``authoritative`` added)."""
    return lambda head: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {owner_url}{head}"
                         f"{'&' if '?' in head else '?'}authoritative={authoritative}\r\n"
                         "Content-Length: 0\r\n\r\n").encode()


class RedirectingServer(KeepAliveServer):
    """A KeepAliveServer whose reply is built from the request target (``reply(target)``)."""

    closing = False  # True: close each connection after its reply (so a shut-down server leaves nothing open)

    def _exchange(self, conn):
        with conn:
            for head in self._heads(conn):
                target = head.split(b" ", 2)[1].decode()
                conn.sendall(self.reply(target))
                if self.closing:
                    return


@pytest.fixture
def front(serve):
    """``front(reply)`` starts a RedirectingServer: its reply is built from the request target."""
    return lambda reply: serve(reply, RedirectingServer)


STATS = '{"cumulativeAckPosition": "-1:-1"}'


def stats_calls(server) -> int:
    """The pending-ack stats calls a server was sent (not the cluster listings a client asks besides)."""
    return sum("/pendingAckStats/" in r for r in server.requests)


def test_a_topic_s_next_call_goes_straight_to_the_broker_its_last_redirect_named(serve, front):
    """A poll asks about every topic each interval: after one redirect, the topic's calls enter at its owner (one
    exchange, not two), on the direct path for every hop; another topic still enters at the service broker."""
    owner = serve(lambda n: (ok(STATS), False))
    service = front(to_owner(owner.url))
    with HttpAdmin(service.url, token=SECRET) as admin:
        for _ in range(3):
            assert admin.pending_ack_stats("persistent://public/default/a", "sub") == json.loads(STATS)
        assert stats_calls(service) == 1 and stats_calls(owner) == 3
        assert "authoritative" in owner.requests[0] and "authoritative" not in owner.requests[-1]
        assert all(f"Authorization: Bearer {SECRET}" in r for r in owner.requests)
        admin.pending_ack_stats("persistent://public/default/b", "sub")
        assert stats_calls(service) == 2
        before = len(service.requests)
        with pytest.raises(AdminError):  # the owner's stats are not a cluster list: only where the call went counts
            admin.list_clusters()  # a call about no topic always enters at the service URL
        assert len(service.requests) == before + 1


def test_a_remembered_owner_that_no_longer_owns_the_topic_sends_the_call_on(serve, front):
    """Ownership moves (a bundle unload, a failover): the old owner redirects, the call reaches the new owner, and the
    topic's next call goes there."""
    new = serve(lambda n: (ok(STATS), False))
    moved = threading.Event()
    old = front(lambda target: to_owner(new.url)(target) if moved.is_set() else ok(STATS))
    service = front(to_owner(old.url))
    topic = "persistent://public/default/a"
    with HttpAdmin(service.url, token=SECRET) as admin:
        admin.pending_ack_stats(topic, "sub")
        moved.set()
        admin.pending_ack_stats(topic, "sub")
        admin.pending_ack_stats(topic, "sub")
    assert (stats_calls(service), stats_calls(old), stats_calls(new)) == (1, 2, 2)


def test_a_remembered_owner_that_is_gone_is_forgotten_and_the_call_enters_at_the_service_url(serve, front):
    """A stopped broker refuses connections: the call is not failed for it (nothing was sent), it enters at the
    service URL as if nothing were remembered, and follows the redirect to whoever owns the topic now."""
    gone = serve(lambda n: (ok(STATS), True))  # closes after each reply, so closing it leaves nothing open
    survivor = serve(lambda n: (ok(STATS), False))
    owner = [gone.url]
    service = front(lambda target: to_owner(owner[0])(target))
    topic = "persistent://public/default/a"
    with HttpAdmin(service.url, token=SECRET, retry_backoff=30) as admin:  # a retry would sleep past the test
        admin.pending_ack_stats(topic, "sub")
        gone.sock.shutdown(socket.SHUT_RDWR)  # wakes its accept(): the port refuses connections from now on
        gone.close()
        owner[0] = survivor.url
        assert admin.pending_ack_stats(topic, "sub") == json.loads(STATS)
        admin.pending_ack_stats(topic, "sub")
    assert (stats_calls(service), stats_calls(gone), stats_calls(survivor)) == (2, 1, 2)


def test_a_redirect_that_changes_the_path_is_followed_but_not_remembered(serve, front):
    owner = serve(lambda n: (ok(STATS), False))
    service = front(lambda target: (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {owner.url}/elsewhere\r\n"
                                    "Content-Length: 0\r\n\r\n").encode())
    with HttpAdmin(service.url, token=SECRET) as admin:
        for _ in range(2):
            admin.pending_ack_stats("persistent://public/default/a", "sub")
    assert (stats_calls(service), len(owner.requests)) == (2, 2)  # nor taken for a cluster's owner redirect


def test_the_redirected_hop_takes_the_direct_path_too(serve, front, monkeypatch):
    """No httpx request object for a plain-http hop, first or redirected (it cost a third of a call's client CPU)."""
    from txnadmin.admin import http

    def refuse(*args, **kwargs):
        raise AssertionError("httpx's path taken for a plain-http hop")

    monkeypatch.setattr(http, "exchange", refuse)
    owner = serve(lambda n: (ok(STATS), False))
    service = front(to_owner(owner.url))
    with HttpAdmin(service.url, token=SECRET) as admin:
        assert admin.pending_ack_stats("persistent://public/default/a", "sub") == json.loads(STATS)
        assert admin.pending_ack_stats("persistent://public/default/a", "sub") == json.loads(STATS)
    assert (stats_calls(service), stats_calls(owner)) == (1, 2)


class FakeCluster:
    """Two brokers on loopback: the service broker owns nothing of public/default, ``owner`` owns all four bundles.
    The service broker answers the cluster listing and redirects every topic call to the owner."""

    def __init__(self, front, serve, owned_reply=None):
        self.owner = front(self._owner_reply)
        self.service = front(self._service_reply)
        self.owned_reply = owned_reply

    def ident(self, server) -> str:
        return server.url.removeprefix("http://")

    def _bundles(self) -> str:
        if self.owned_reply is not None:
            return self.owned_reply
        status = '{"broker_assignment": "shared", "is_controlled": false, "is_active": true}'
        return "{" + ", ".join(f'"public/default/{b}": {status}' for b in (
            "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff")) + "}"

    def _owner_reply(self, target: str) -> bytes:
        return ok(self._bundles() if "/ownedNamespaces" in target else STATS)

    def _service_reply(self, target: str) -> bytes:
        if target == "/admin/v2/clusters":
            return ok('["c"]')
        if target == "/admin/v2/brokers/c":
            return ok(json.dumps([self.ident(self.service), self.ident(self.owner)]))
        if target == f"/admin/v2/brokers/c/{self.ident(self.service)}/ownedNamespaces":
            return ok("{}")
        return to_owner(self.owner.url)(target)



def test_a_fresh_client_asks_the_brokers_what_they_own_and_sends_each_topic_to_its_owner(serve, front):
    """After its second redirected call, a client asks every broker which bundles it owns, once; every other
    topic's first call then enters at its owner, as a fresh `downgrade status` process would otherwise pay a
    redirect each. One redirected call alone asks nothing (a one-call command would not use the answer)."""
    cluster = FakeCluster(front, serve)
    with HttpAdmin(cluster.service.url, token=SECRET) as admin:
        admin.pending_ack_stats("persistent://public/default/t0", "sub")
        assert not any("ownedNamespaces" in r for r in cluster.service.requests)
        for i in range(1, 6):
            assert admin.pending_ack_stats(f"persistent://public/default/t{i}", "sub") == json.loads(STATS)
    assert stats_calls(cluster.service) == 2 and stats_calls(cluster.owner) == 6  # asked after the second redirect
    asked = [r.split(" ")[1] for r in cluster.service.requests if "ownedNamespaces" in r]  # each once, at the
    assert sorted(asked) == sorted(f"/admin/v2/brokers/c/{cluster.ident(b)}/ownedNamespaces"  # service URL (it
                                   for b in (cluster.service, cluster.owner))  # sends the other on, as Pulsar does)


@pytest.mark.parametrize("owned", ['["not", "a", "map"]', '{"public/default/0x00000000_0xffffffff": 7}',
                                   "<html>login</html>", '{"x": {}}'])
def test_a_garbage_ownership_reply_only_means_calls_keep_following_redirects(serve, front, owned):
    cluster = FakeCluster(front, serve, owned_reply=owned)
    with HttpAdmin(cluster.service.url, token=SECRET) as admin:
        for i in range(3):
            assert admin.pending_ack_stats(f"persistent://public/default/t{i}", "sub") == json.loads(STATS)
    assert stats_calls(cluster.service) == 3 and stats_calls(cluster.owner) == 3


def test_a_predicted_owner_that_refuses_connections_is_dropped_and_calls_enter_at_the_service_url(serve, front):
    cluster = FakeCluster(front, serve)
    cluster.owner.closing = True
    survivor = serve(lambda n: (ok(STATS), False))  # listening before the owner's port is freed: not on it
    with HttpAdmin(cluster.service.url, token=SECRET, retry_backoff=30) as admin:
        for i in range(2):  # the second redirect has the client ask what each broker owns
            admin.pending_ack_stats(f"persistent://public/default/first-{i}", "sub")
        cluster.owner.sock.shutdown(socket.SHUT_RDWR)
        cluster.owner.close()
        cluster.owner = survivor  # the service broker now redirects to the survivor
        for i in range(1, 4):
            assert admin.pending_ack_stats(f"persistent://public/default/t{i}", "sub") == json.loads(STATS)
    assert stats_calls(cluster.service) == 5 and len(survivor.requests) == 3


def test_a_change_about_a_topic_goes_to_its_owner_too(serve, front):
    """`downgrade start` unloads every topic (a PUT): after the bundles are known it goes straight to the owner,
    once, with its method."""
    cluster = FakeCluster(front, serve)
    with HttpAdmin(cluster.service.url, token=SECRET) as admin:
        for i in range(2):
            admin.pending_ack_stats(f"persistent://public/default/t{i}", "sub")
        admin.unload_topic("persistent://public/default/t9")
    unloads = [r for server in (cluster.service, cluster.owner) for r in server.requests if "/unload" in r]
    assert len(unloads) == 1 and unloads[0].startswith("PUT ") and unloads[0] in cluster.owner.requests
