"""Pulsar's published Swagger spec for /admin/v3/transactions as a contract, both ways.

The spec (swaggertransactions.json beside this file) is apache/pulsar-site's static/swagger/4.0.12/
swaggertransactions.json, Apache-2.0 like Pulsar, vendored unchanged. It is checked two ways:

* `txnadmin serve`'s replies validate against it (jsonschema; Swagger 2.0 schemas are JSON Schema draft 4), for
  every GET path it declares, on a real server process over an engine that holds every kind of state;
* the client accepts every reply the spec allows: a hypothesis strategy generated from each reply schema (below:
  hypothesis-jsonschema 0.23 fails on the hypothesis this project pins, and the spec's Swagger subset is small)
  feeds HttpAdmin and the commands that read those replies. Every generated reply is validated first, so the
  generator cannot drift from the spec.

Where the spec is wrong about Pulsar, the list below says so and why; each entry is checked against the spec too,
so a fixed spec makes the list fail rather than go stale.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from serve_helpers import serving
from txnadmin.admin.endpoints import ENDPOINTS, V3
from txnadmin.admin.hanging import open_transactions
from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import TxnId
from txnadmin.cli.main import app
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine

SPEC = json.loads((Path(__file__).parent / "swaggertransactions.json").read_text())
BASE = SPEC["basePath"] + "/transactions"  # /admin/v3/transactions: the paths below are relative to /admin/v3

# The spec's known defects: (method, path) → what Pulsar really does, and why the spec cannot say it.
KNOWN_DEFECTS = {
    ("get", "/transactions/coordinatorStats"):
        "without coordinatorId Pulsar answers a map of coordinator id → TransactionCoordinatorStats "
        "(Transactions.getCoordinatorStats fans out to every coordinator); the spec declares one object",
    ("post", "/transactions/transactionCoordinator/replicas"):
        "the body (the new replica count, a bare JSON number) is not declared: the operation lists no parameters",
}


def reply_schema(method: str, path: str) -> dict:
    """The 200 reply's schema of one operation, with the spec's definitions so its $refs resolve."""
    schema = SPEC["paths"][path][method]["responses"]["200"]["schema"]
    return dict(schema, definitions=SPEC["definitions"])


def validate(value: object, schema: dict, what: str) -> None:
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    assert not errors, f"{what}: {errors[0].message} at {list(errors[0].absolute_path)}"


def test_the_known_defects_are_still_in_the_spec():
    stats = SPEC["paths"]["/transactions/coordinatorStats"]["get"]
    assert stats["responses"]["200"]["schema"] == {"$ref": "#/definitions/TransactionCoordinatorStats"}
    scale = SPEC["paths"]["/transactions/transactionCoordinator/replicas"]["post"]
    assert "parameters" not in scale
    assert set(KNOWN_DEFECTS) <= {(m, p) for p, ops in SPEC["paths"].items() for m in ops}


def test_every_row_under_v3_is_a_path_the_spec_publishes():
    published = {(m.upper(), SPEC["basePath"] + p) for p, ops in SPEC["paths"].items() for m in ops}
    ours = {(row.method, row.path) for row in ENDPOINTS.values() if row.path.startswith(V3)}
    assert ours == published


# -- serve's replies validate ----------------------------------------------------------------------------------------
ORDERS = "persistent://public/default/orders"
REFUNDS = "persistent://public/default/refunds"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real `serve` over an engine with an open transaction (produced and acked), ended ones, and a snapshot."""
    base = tmp_path_factory.mktemp("spec")
    engine_dir = base / "engine"
    config = EngineConfig()
    config.transactionCoordinatorCount = 2
    config.transactionBufferSnapshotMaxTransactionCount = 2  # two aborts take REFUNDS' snapshot
    config.save(engine_dir)
    engine = Engine(engine_dir, EngineConfig.load(engine_dir), maintenance=False)
    engine.subscribe(ORDERS, "billing")
    first = engine.publish(ORDERS, b"m0")
    open_txn = engine.begin(3_600_000, owner="spec", tc_id=1)
    engine.produce(open_txn, ORDERS, b"pending")
    engine.receive(ORDERS, "billing", 1)
    engine.ack(open_txn, ORDERS, "billing", [first])
    for _ in range(2):
        refund = engine.begin(60_000, tc_id=0)
        engine.produce(refund, REFUNDS, b"refund")
        engine.abort(refund)
    engine.close()
    with serving(engine_dir, base / "home") as (url, token):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
            yield client, TxnId(*open_txn), first


def _requests(txn: TxnId, first) -> list[tuple[str, str, dict]]:
    """(spec path, our URL, query) for each GET the spec declares, with values the engine holds."""
    t, m, l = "public/default/orders", txn.most_bits, txn.least_bits
    return [
        ("/transactions/coordinators", "/coordinators", {}),
        ("/transactions/coordinatorStats", "/coordinatorStats", {"coordinatorId": "1"}),
        ("/transactions/coordinatorInternalStats/{coordinatorId}", "/coordinatorInternalStats/1", {"metadata": "true"}),
        ("/transactions/slowTransactions/{timeout}", "/slowTransactions/0", {}),
        ("/transactions/transactionMetadata/{mostSigBits}/{leastSigBits}", f"/transactionMetadata/{m}/{l}", {}),
        ("/transactions/transactionBufferStats/{tenant}/{namespace}/{topic}", f"/transactionBufferStats/{t}",
         {"lowWaterMarks": "true", "segmentStats": "true"}),
        ("/transactions/transactionBufferInternalStats/{tenant}/{namespace}/{topic}",
         "/transactionBufferInternalStats/public/default/refunds", {"metadata": "true"}),
        ("/transactions/transactionInBufferStats/{tenant}/{namespace}/{topic}/{mostSigBits}/{leastSigBits}",
         f"/transactionInBufferStats/{t}/{m}/{l}", {}),
        ("/transactions/pendingAckStats/{tenant}/{namespace}/{topic}/{subName}", f"/pendingAckStats/{t}/billing",
         {"lowWaterMarks": "true"}),
        ("/transactions/pendingAckInternalStats/{tenant}/{namespace}/{topic}/{subName}",
         f"/pendingAckInternalStats/{t}/billing", {"metadata": "true"}),
        ("/transactions/transactionInPendingAckStats/{tenant}/{namespace}/{topic}/{subName}/{mostSigBits}/"
         "{leastSigBits}", f"/transactionInPendingAckStats/{t}/billing/{m}/{l}", {}),
        ("/transactions/positionStatsInPendingAck/{tenant}/{namespace}/{topic}/{subName}/{ledgerId}/{entryId}",
         f"/positionStatsInPendingAck/{t}/billing/{first.ledger_id}/{first.entry_id}", {}),
    ]


@pytest.mark.slow  # the module's server starts here
def test_every_get_the_spec_declares_is_asked_below(served):
    _, txn, first = served
    declared = {p for p, ops in SPEC["paths"].items() if "get" in ops}
    assert {path for path, _, _ in _requests(txn, first)} == declared


@pytest.mark.slow
def test_serve_replies_validate_against_the_spec(served):
    client, txn, first = served
    for path, url, query in _requests(txn, first):
        reply = client.get(BASE + url, params=query)
        assert reply.status_code == 200, (url, reply.text)
        body = reply.json()
        # an empty object would validate and prove nothing; only an individual ack's in-pending-ack stats are empty
        # (cumulativeAckPosition, their one field, is null and left out, as Pulsar's Jackson leaves nulls out)
        assert body or "/transactionInPendingAckStats/" in url, (url, body)
        validate(body, reply_schema("get", path), url)


@pytest.mark.slow
def test_coordinator_stats_of_all_coordinators_is_the_known_map(served):
    client, _, _ = served
    body = client.get(BASE + "/coordinatorStats").json()
    assert sorted(body) == ["0", "1"]
    one = dict(reply_schema("get", "/transactions/coordinatorStats"))
    for stats in body.values():
        validate(stats, one, "coordinatorStats (each coordinator of the map)")


@pytest.mark.slow
def test_scale_takes_the_undeclared_bare_number_body(served):
    client, _, _ = served
    reply = client.post(BASE + "/transactionCoordinator/replicas", content=b"3",
                        headers={"Content-Type": "application/json"})
    assert reply.status_code == 204, reply.text
    assert [c["id"] for c in client.get(BASE + "/coordinators").json()] == [0, 1, 2]


# -- the client accepts every spec-valid reply -----------------------------------------------------------------------
_INTEGERS = {"int64": st.integers(-2**63, 2**63 - 1), "int32": st.integers(-2**31, 2**31 - 1)}
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))  # what an undeclared field may be


def from_schema(schema: dict) -> st.SearchStrategy:
    """Every value the Swagger 2.0 schema allows (objects: declared fields each optional, plus undeclared ones)."""
    definitions = schema.get("definitions", SPEC["definitions"])

    def build(node: dict) -> st.SearchStrategy:
        if "$ref" in node:
            return build(definitions[node["$ref"].rsplit("/", 1)[1]])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        kind = node.get("type")
        if kind == "array":
            return st.lists(build(node["items"]), max_size=3)
        if kind == "integer":
            return _INTEGERS.get(node.get("format", "int64"), st.integers())
        if kind == "boolean":
            return st.booleans()
        if kind == "string":
            return st.text(max_size=16)
        assert kind == "object", node
        declared = node.get("properties", {})
        if "additionalProperties" in node:
            return st.dictionaries(st.text(max_size=12), build(node["additionalProperties"]), max_size=3)
        fields = st.fixed_dictionaries({}, optional={name: build(sub) for name, sub in declared.items()})
        extra = st.dictionaries(st.text(max_size=12).filter(lambda k: k not in declared), _LEAVES, max_size=2)
        return st.builds(lambda known, more: {**more, **known}, fields, extra)

    return build(schema)


def _admin_answering(body: object) -> HttpAdmin:
    content = json.dumps(body).encode()
    return HttpAdmin("http://broker.example:8080", retry_backoff=0, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=content, headers={"Content-Type": "application/json"})))


# A call per row, with arguments that fill its path (the reply is what is under test, not the request).
CALLS = {
    "list_coordinators": (), "coordinator_stats": (0,), "coordinator_internal_stats": (0,),
    "pending_ack_internal_stats": (ORDERS, "billing"), "buffer_snapshot_internal_stats": (ORDERS,),
    "transaction_buffer_stats": (ORDERS,), "pending_ack_stats": (ORDERS, "billing"),
    "transaction_in_buffer_stats": (TxnId(0, 1), ORDERS),
    "transaction_in_pending_ack_stats": (TxnId(0, 1), ORDERS, "billing"),
    "transaction_metadata": (TxnId(0, 1),), "slow_transactions": (0,),
    "position_stats_in_pending_ack": (ORDERS, "billing", 1, 2),
}
SPEC_PATH = {row.call: row.path.removeprefix(SPEC["basePath"]) for row in ENDPOINTS.values()
             if row.call in CALLS}
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])


def test_every_reading_row_is_fed_spec_replies():
    reading = {row.call for row in ENDPOINTS.values() if row.path.startswith(V3) and row.method == "GET"}
    assert reading == set(CALLS)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_httpadmin_accepts_every_spec_valid_reply(call):
    schema = reply_schema("get", SPEC_PATH[call])

    @SETTINGS
    @given(from_schema(schema))
    def accepts(body):
        validate(body, schema, f"generated {call} reply")
        with _admin_answering(body) as admin:
            assert getattr(admin, call)(*CALLS[call]) == body

    accepts()


@SETTINGS
@given(from_schema(reply_schema("get", "/transactions/slowTransactions/{timeout}")))
def test_list_reads_every_spec_valid_slow_transactions_reply(body):
    with _admin_answering(body) as admin:
        rows = open_transactions(admin, now_ms=1_790_000_000_000)
    assert sorted(r["txnId"] for r in rows) == sorted(body)  # every entry shown, whatever its key


runner = CliRunner()


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(from_schema(reply_schema("get", "/transactions/coordinators")))
def test_coordinators_list_prints_every_spec_valid_reply(body):
    import txnadmin.admin.target as target

    original = target.open_admin
    target.open_admin = lambda t: _admin_answering(body)
    try:
        text = runner.invoke(app, ["-u", "http://broker.example:8080", "transactions", "coordinators-list"])
        as_json = runner.invoke(app, ["-u", "http://broker.example:8080", "transactions", "coordinators-list",
                                      "-o", "json"])
    finally:
        target.open_admin = original
    assert text.exit_code == 0 and as_json.exit_code == 0, (text.output, as_json.output)
    assert json.loads(as_json.stdout) == body
