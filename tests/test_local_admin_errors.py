"""LocalAdmin answers engine errors with the status Pulsar's REST API gives, through one explicit table; anything
else is a bug and is not dressed up as a 404 or a 412."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from typer.testing import CliRunner

import txnadmin.engine as engine_pkg
from txnadmin.admin import local
from txnadmin.admin.local import LocalAdmin, engine_error_status
from txnadmin.admin.protocol import AdminError, NotFoundError
from txnadmin.cli.main import app
from txnadmin.engine import stats
from txnadmin.engine.config import ConfigError
from txnadmin.engine.coordinator import CoordinatorError, CoordinatorNotReady, InvalidTxnStatus, TransactionNotFound
from txnadmin.engine.engine import EngineError, NotAcceptable, NotFound
from txnadmin.engine.pending_ack import PendingAckConflict, PendingAckNotAllowed
from txnadmin.engine.stats import NotReady
from txnadmin.engine.tb_snapshot import SnapshotError

from engine_helpers import open_engine

TOPIC = "persistent://public/default/orders"

EXPECTED = [
    (TransactionNotFound, 404), (InvalidTxnStatus, 409), (CoordinatorNotReady, 503), (CoordinatorError, 500),
    (NotFound, 404), (NotAcceptable, 406), (NotReady, 503), (EngineError, 500), (PendingAckConflict, 409),
    (PendingAckNotAllowed, 405), (SnapshotError, 500), (ConfigError, 412),
]


@pytest.fixture
def admin(tmp_path):
    with open_engine(tmp_path / "e") as engine:
        yield LocalAdmin(engine)


@pytest.mark.parametrize("kind, status", EXPECTED, ids=[k.__name__ for k, _ in EXPECTED])
def test_each_engine_error_gets_pulsars_status(admin, monkeypatch, kind, status):
    def fails(*args, **kwargs):
        raise kind("what went wrong")

    monkeypatch.setattr(stats, "pending_ack_stats", fails)
    with pytest.raises(AdminError) as err:
        admin.pending_ack_stats(TOPIC, "sub")
    assert (err.value.status, err.value.reason) == (status, "what went wrong")
    assert isinstance(err.value, NotFoundError) == (status == 404)


@pytest.mark.parametrize("bug", [KeyError("coordinators"), ValueError("bad unpack"), LookupError("x"),
                                 AttributeError("nope")])
def test_a_bug_is_not_dressed_up_as_an_answer(admin, monkeypatch, bug):
    def fails(*args, **kwargs):
        raise bug

    monkeypatch.setattr(stats, "pending_ack_stats", fails)
    with pytest.raises(type(bug)) as err:
        admin.pending_ack_stats(TOPIC, "sub")
    assert not isinstance(err.value, AdminError) and engine_error_status(err.value) is None


def test_a_subclass_row_comes_before_its_base():
    rows = [kind for kind, _ in local._engine_statuses()]
    for i, kind in enumerate(rows):
        for later in rows[i + 1:]:
            assert not issubclass(later, kind) or later is kind, f"{later.__name__} is shadowed by {kind.__name__}"


def test_engine_classes_carry_no_http_status():
    carrying = []
    for info in pkgutil.walk_packages(engine_pkg.__path__, engine_pkg.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException) and hasattr(cls, "status"):
                carrying.append(f"{module.__name__}.{name}")
    assert not carrying


def test_an_invalid_topic_name_is_412_naming_it(admin):
    with pytest.raises(AdminError) as err:
        admin.pending_ack_stats("tenant/orders", "sub")
    assert err.value.status == 412 and "tenant/orders" in err.value.reason
    with pytest.raises(AdminError) as err:
        admin.topic_internal_stats("a/b")
    assert err.value.status == 412


def test_an_invalid_topic_name_through_the_cli_is_one_failure_line(tmp_path):
    runner = CliRunner()
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    result = runner.invoke(app, ["-u", f"local:{d}", "transactions", "pending-ack-stats", "-t", "tenant/orders",
                                 "-s", "sub"])
    assert result.exit_code == 1, result.output
    assert "Invalid short topic name 'tenant/orders'" in result.stderr and "Traceback" not in result.output
