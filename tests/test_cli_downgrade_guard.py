"""`downgrade guard --broker B`: a B that is not among the target's active brokers (a typo) is refused as soon as the
active brokers are read, before the poll reads a single log or a broker's counters, with exit 3 and the list.

Whether guard holds or refuses a verdict is proven in test_cli_downgrade_evidence.py
(test_guard_before_each_broker_catches_a_batched_write_after_the_verdict)."""

from __future__ import annotations

from txnadmin.procedures.downgrade.checklist import load_state, save_state

from downgrade_helpers import TOKEN, cli, served_engine
from http_front import front

# What one poll reads and the broker check needs none of: every log (the transactions endpoints), the topic
# listing, and each broker's flush counters.
POLL_READS = ("/admin/v3/transactions/", "/admin/v2/persistent/", "/admin/v2/namespaces/", "/metrics")


def test_a_broker_the_target_does_not_list_is_refused_before_the_poll(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (_engine, url), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        recorded = load_state(state)
        recorded["safeVerdict"] = {"at": 1_700_000_000_000, "poll": 1}  # what `wait` records when it says safe
        save_state(state, recorded)
        door.seen.clear()
        typo = cli(door.url, "downgrade", "guard", "--broker", "10.0.0.9:8080", "--state", str(state))
        assert typo.returncode == 3, typo.stdout + typo.stderr
        assert "broker 10.0.0.9:8080 is not among the target's active brokers" in typo.stderr, typo.stderr
        assert "Traceback" not in typo.stderr
        asked = [path for _, path in door.seen]
        assert asked and not [p for p in asked if p.startswith(POLL_READS)], asked
