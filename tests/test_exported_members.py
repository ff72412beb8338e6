"""The public surface is what it claims to be, and both backends satisfy the protocol."""

from __future__ import annotations

import inspect

import txnadmin.admin as admin
import txnadmin.codec as codec
import txnadmin.scan as scan
from txnadmin.admin.protocol import TransactionsAdmin


def test_all_lists_exactly_the_public_names():
    for module in (admin, codec, scan):
        public = {n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n))}
        assert set(module.__all__) == public, module.__name__


def test_both_backends_implement_every_protocol_method():
    methods = {n for n, v in vars(TransactionsAdmin).items() if callable(v) and not n.startswith("_")}
    for cls in (admin.LocalAdmin, admin.HttpAdmin):
        missing = {m for m in methods if not callable(getattr(cls, m, None))}
        assert not missing, (cls.__name__, missing)
        for m in methods:
            proto = list(inspect.signature(getattr(TransactionsAdmin, m)).parameters)
            impl = list(inspect.signature(getattr(cls, m)).parameters)
            assert impl == proto, (cls.__name__, m)


def test_every_backend_has_its_own_lifecycle():
    # its own close/__enter__/__exit__, not the protocol's empty stubs: `with admin:` must really release
    for cls in (admin.LocalAdmin, admin.HttpAdmin):
        for name in ("close", "__enter__", "__exit__"):
            assert name in vars(cls), (cls.__name__, name)


def test_a_local_admin_releases_the_engine_when_its_block_ends(tmp_path):
    from txnadmin.admin.target import Target, open_admin
    from txnadmin.engine.engine import Engine
    from txnadmin.engine.manage import init_engine

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "1"})
    target = Target(f"local:{tmp_path / 'e'}", "--admin-url")
    with open_admin(target) as local:
        assert isinstance(local, admin.LocalAdmin)
        assert local.list_clusters() == ["standalone"]
    local.close()  # a second close does nothing
    Engine(tmp_path / "e", maintenance=False).close()  # the directory lock was given back
    try:
        with open_admin(target) as local:
            raise KeyError("boom")
    except KeyError:
        pass
    Engine(tmp_path / "e", maintenance=False).close()  # released on the error path too


def test_an_http_admin_closes_its_transport_when_its_block_ends():
    import httpx

    class Counting(httpx.MockTransport):
        closed = 0

        def close(self) -> None:
            Counting.closed += 1

    transport = Counting(lambda request: httpx.Response(200, json=["standalone"]))
    with admin.HttpAdmin("http://broker:8080", transport=transport) as remote:
        assert remote.list_clusters() == ["standalone"]
        assert Counting.closed == 0
    assert Counting.closed == 1
