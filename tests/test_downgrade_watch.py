"""The downgrade's watch, round by round, against brokers whose answers the test scripts: every way the flags or
counters could hide a batched write must keep a reopen from being accepted (issue #24, rule 1)."""

from __future__ import annotations

import time

from txnadmin.admin.cluster import BrokerReading
from txnadmin.admin.protocol import AdminError
from txnadmin.procedures.downgrade.watch import Watch, counter_problem


class Brokers:
    """A scripted cluster: what each broker answers at the next round."""

    def __init__(self, *names: str, flushes: float = 3.0):
        self.listed: list[str] | Exception = list(names)
        self.on: dict[str, tuple[str, ...]] = {}
        self.down: set[str] = set()
        self.flushes = {n: flushes for n in names}
        self.process: dict[str, float | None] = {n: 1000.0 for n in names}
        self.cache_s: dict[str, float] = {}
        self.counter_error: dict[str, str] = {}
        self.cpu = {n: 1.0 for n in names}  # process_cpu_seconds_total: moves at every read unless frozen
        self.frozen: set[str] = set()

    def active_brokers(self, fresh: bool = False) -> list[str]:
        if isinstance(self.listed, Exception):
            raise self.listed
        return list(self.listed)

    def read_brokers(self, brokers: list[str]) -> dict[str, BrokerReading]:
        out = {}
        for b in brokers:
            at = time.monotonic()
            if b in self.down:
                out[b] = BrokerReading(b, at, error="cannot connect (Connection refused)")
            elif b in self.counter_error:
                out[b] = BrokerReading(b, at, self.on.get(b, ()), counter_error=self.counter_error[b])
            else:
                self.cpu.setdefault(b, 1.0)
                if b not in self.frozen:
                    self.cpu[b] += 0.01
                out[b] = BrokerReading(b, at, self.on.get(b, ()), flushes=self.flushes[b],
                                       process_start=self.process[b], cache_s=self.cache_s.get(b, 0.0),
                                       cpu=self.cpu[b])
        return out


def _watch(brokers: Brokers, period: float = 0.05) -> Watch:
    baselines = {b: {"processStart": brokers.process[b], "flushes": brokers.flushes[b]} for b in brokers.process}
    return Watch(brokers, baselines, period)  # type: ignore[arg-type]  # a scripted stand-in for ClusterView


def _bracket(watch: Watch, brokers: Brokers, between) -> tuple:
    """Round, poll m (t=a), what happens between, poll n (t=b), round: judged over [a, b]."""
    watch.read_round()
    a = time.monotonic()
    watch.read_round()
    between()
    b = time.monotonic()
    watch.read_round()
    return watch.flags_off_between(a, b), watch.counters(b)


def test_a_still_cluster_proves_the_interval():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers)
    (flags, why), (counters, cwhy) = _bracket(watch, brokers, lambda: None)
    assert flags is True and "2/2 brokers" in why
    assert counters is True


def test_a_flag_seen_on_between_the_polls_fails_the_proof():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers)

    def switch():
        brokers.on["b2:8080"] = ("transactionPendingAckBatchedWriteEnabled",)
        watch.read_round()
        brokers.on.clear()

    (flags, why), _ = _bracket(watch, brokers, switch)
    assert flags is False and "b2:8080" in why and "transactionPendingAckBatchedWriteEnabled=true" in why


def test_a_broker_joining_or_leaving_between_the_polls_fails_the_proof():
    for change in (lambda b: b.listed.append("b3:8080"), lambda b: b.listed.remove("b2:8080")):
        brokers = Brokers("b1:8080", "b2:8080")
        brokers.flushes["b3:8080"], brokers.process["b3:8080"] = 0.0, 5.0
        watch = _watch(brokers)

        def move(brokers=brokers, change=change, watch=watch):
            change(brokers)
            watch.read_round()

        (flags, why), _ = _bracket(watch, brokers, move)
        assert flags is False and "active brokers changed" in why


def test_a_broker_unread_for_more_than_one_period_is_a_gap_but_one_missed_read_is_not():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers, period=0.2)

    def one_miss():
        brokers.down.add("b2:8080")
        watch.read_round()
        brokers.down.clear()

    (flags, _), _ = _bracket(watch, brokers, one_miss)
    assert flags is True

    def long_miss():
        brokers.down.add("b2:8080")
        for _ in range(5):  # b1 read every 0.1 s, b2 unreadable for 0.5 s: more than one period
            watch.read_round()
            time.sleep(0.1)
        brokers.down.clear()

    (flags, why), _ = _bracket(watch, brokers, long_miss)
    assert flags is False and "b2:8080" in why and "gap" in why


def test_a_pause_of_the_watch_itself_is_a_gap():
    brokers = Brokers("b1:8080")
    watch = _watch(brokers, period=0.1)
    (flags, why), _ = _bracket(watch, brokers, lambda: time.sleep(0.35))
    assert flags is False and "gap" in why


def test_an_unreadable_active_list_is_a_gap_when_it_lasts():
    brokers = Brokers("b1:8080")
    watch = _watch(brokers, period=0.1)

    def listing_down():
        brokers.listed = AdminError("cannot connect", 0)
        watch.read_round()
        time.sleep(0.3)
        watch.read_round()
        brokers.listed = ["b1:8080"]

    (flags, why), _ = _bracket(watch, brokers, listing_down)
    assert flags is False and "gap" in why


def test_a_restart_within_one_period_is_a_gap_even_with_every_read_off():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers)

    def restart():
        brokers.process["b2:8080"] = 2000.0
        brokers.flushes["b2:8080"] = 0.0  # a new process counts from zero
        watch.read_round()

    (flags, why), (counters, _) = _bracket(watch, brokers, restart)
    assert flags is False and "restarted" in why
    assert counters is True  # zero batched flushes in the new process: the counters alone say nothing moved


def test_a_new_process_with_flushes_is_movement_though_below_the_old_count():
    brokers = Brokers("b1:8080", flushes=50.0)
    watch = _watch(brokers)
    brokers.process["b1:8080"] = 2000.0
    brokers.flushes["b1:8080"] = 4.0  # lower than the baseline, yet 4 batched flushes since it started
    watch.read_round()
    ok, why = watch.counters(time.monotonic() - 1)
    assert ok is False and "from 0 (a new broker process counts from zero) to 4" in why


def test_a_counter_that_moves_is_remembered_and_a_rebase_forgets_it():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers)
    watch.read_round()
    brokers.flushes["b1:8080"] += 1
    watch.read_round()
    brokers.flushes["b1:8080"] -= 1  # even a counter seen moving once and then "back" stays moved
    watch.read_round()
    ok, why = watch.counters(time.monotonic() - 1)
    assert ok is False and "b1:8080" in why and "from 3 to 4" in why
    watch.rebase({b: {"processStart": brokers.process[b], "flushes": brokers.flushes[b]} for b in brokers.process})
    watch.read_round()
    assert watch.counters(time.monotonic() - 1)[0] is True


def test_counters_that_cannot_be_read_never_prove_and_are_named():
    brokers = Brokers("b1:8080", "b2:8080")
    brokers.counter_error["b2:8080"] = "/metrics: 404 Not Found"
    watch = _watch(brokers)
    watch.read_round()
    ok, why = watch.counters(time.monotonic() - 1)
    assert ok is None and "b2:8080" in why and "404" in why


def test_cached_counters_cover_only_the_start_of_their_slot():
    brokers = Brokers("b1:8080")
    brokers.cache_s["b1:8080"] = 60.0
    watch = _watch(brokers)
    poll_end = time.monotonic()
    watch.read_round()  # read after the poll, but its counters are up to 60 s older
    ok, why = watch.counters(poll_end)
    assert ok is None and "cached" in why


def test_no_round_before_the_bracket_is_not_bracketed():
    brokers = Brokers("b1:8080")
    watch = _watch(brokers)
    a = time.monotonic()
    watch.read_round()
    b = time.monotonic()
    watch.read_round()
    ok, why = watch.flags_off_between(a, b)
    assert ok is False and "not bracketed" in why


def test_no_round_after_the_bracket_yet_is_pending_not_proven():
    brokers = Brokers("b1:8080")
    watch = _watch(brokers)
    watch.read_round()
    a = time.monotonic()
    b = time.monotonic()
    ok, _ = watch.flags_off_between(a, b)
    assert ok is None


def test_counter_problem_without_process_start_still_sees_growth():
    reading = BrokerReading("b1:8080", 0.0, flushes=9.0)
    problem, moved = counter_problem(reading, {"b1:8080": {"processStart": None, "flushes": 5.0}})
    assert moved is not None and moved.after == 9.0
    problem, moved = counter_problem(BrokerReading("b1:8080", 0.0, flushes=5.0),
                                     {"b1:8080": {"processStart": None, "flushes": 5.0}})
    assert moved is None and "process_start_time_seconds" in (problem or "")


def test_a_broker_without_coordinators_needs_no_counters():
    reading = BrokerReading("b9:8080", 0.0, coordinator_enabled=False, counter_error="no counters")
    assert counter_problem(reading, {}) == (None, None)


def test_the_background_watch_reads_every_period_and_stops():
    brokers = Brokers("b1:8080")
    with _watch(brokers, period=0.05) as watch:
        assert watch.wait_for_round(time.monotonic() + 0.1, 5.0) is not None
        assert len(watch.rounds) >= 2
    count = len(watch.rounds)
    time.sleep(0.2)
    assert len(watch.rounds) <= count + 1


# -- the one exposition reader ------------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st

from txnadmin.metrics.exposition import (
    DOWNGRADE_METRICS, ExpositionError, batched_flushes_by_label, parse_exposition, process_start_time,
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_is_an_exposition_or_an_exposition_error(text):
    for only in ((), DOWNGRADE_METRICS):
        try:
            samples = parse_exposition(text, only)
        except ExpositionError:
            continue
        batched_flushes_by_label(samples)
        process_start_time(samples)


def test_only_the_named_metrics_are_kept_and_labels_split_the_counts():
    text = ("# HELP process_start_time_seconds Start time\n# TYPE process_start_time_seconds gauge\n"
            "process_start_time_seconds 1700000000.5\n"
            "# TYPE pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay_total counter\n"
            'pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay_total{broker="10.0.0.1"} 4\n'
            'pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_large_data_total{broker="10.0.0.1"} 1\n'
            'pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_max_records_total{broker="10.0.0.2"} 7\n'
            "# TYPE pulsar_topics_count gauge\npulsar_topics_count{cluster=\"c\"} not-a-number\n")
    samples = parse_exposition(text, DOWNGRADE_METRICS)  # the broken unrelated line is never parsed
    assert batched_flushes_by_label(samples) == {"10.0.0.1": 5.0, "10.0.0.2": 7.0}
    assert process_start_time(samples) == 1700000000.5
    for page in ("<html><body>login</body></html>", '{"reason": "x"}'):
        try:
            parse_exposition(page, DOWNGRADE_METRICS)
        except ExpositionError as exc:
            assert "not a Prometheus exposition" in str(exc)
        else:
            raise AssertionError(page)


def test_poll_numbers_never_repeat_within_a_wait_though_the_checklist_was_not_saved():
    """A poll that changes nothing saves nothing; numbering from the file alone named two polls 1, and a store
    seen unchanged by the first was bracketed by the second, taken after a restart: a false acceptance."""
    from txnadmin.procedures.downgrade import Session

    class Admin:
        pass

    session = Session(Admin(), "http://b:8080", {})  # type: ignore[arg-type]  # a bare object: new_poll never touches the admin
    on_disk = {"polls": 7}
    first = session.new_poll(dict(on_disk))  # each poll reads the checklist afresh: still 7 on disk
    second = session.new_poll(dict(on_disk))
    assert (first.number, second.number) == (8, 9)
    assert session.polls[8] is first and second.t_start >= first.t_start


def test_a_frozen_metrics_copy_is_no_evidence_and_is_named():
    brokers = Brokers("b1:8080", "b2:8080")
    watch = _watch(brokers)
    brokers.frozen.add("b2:8080")
    (flags, _), (counters, why) = _bracket(watch, brokers, lambda: None)
    assert flags is True
    assert counters is False and "b2:8080" in why and "not live" in why
    brokers.frozen.clear()  # live again: the next pair of reads shows it
    watch.read_round()
    assert watch.counters(time.monotonic() - 1)[0] is True


def test_a_broker_without_a_process_start_time_never_proves_and_a_restart_shows_in_its_counters():
    brokers = Brokers("b1:8080", flushes=40.0)
    brokers.process["b1:8080"] = None
    watch = _watch(brokers)
    (flags, _), (counters, why) = _bracket(watch, brokers, lambda: None)
    assert flags is True  # no restart seen
    assert counters is False and "process_start_time_seconds" in why

    def restart():
        brokers.flushes["b1:8080"] = 2.0  # a new process, counting from zero, below the baseline
    (flags, why), _ = _bracket(watch, brokers, restart)
    assert flags is False and "went down" in why and "process_start_time_seconds" in why
    _, moved = counter_problem(BrokerReading("b1:8080", 0.0, flushes=2.0), {"b1:8080": {"processStart": None,
                                                                                        "flushes": 40.0}})
    assert moved is not None and moved.restarted and "process_start_time_seconds" in moved.describe()
