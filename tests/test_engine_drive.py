"""Many operations on one thread (ops.drive) and the completions that wake them (completion.when_done): each
operation gets its own results and errors, in its own order, no wake-up is lost or delivered twice, and a wait that
never completes times out like a blocking one."""

from __future__ import annotations

import random
import threading
import time

import pytest

from txnadmin.engine.completion import Completion, Pending
from txnadmin.engine.ops import Sleep, drive, gather, gather_op, run


def _in_thread(fn, timeout: float = 60):
    """fn's result, run on a thread with a deadline: a lost wake-up fails the test instead of hanging it."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the driver never finished: a wake-up was lost"
    return box["result"]


def _complete_later(items: list[tuple[Completion, object, BaseException | None]], seed: int = 1) -> threading.Thread:
    """Complete ``items`` from another thread, in a shuffled order, with tiny pauses between some of them."""
    rng = random.Random(seed)
    order = items[:]
    rng.shuffle(order)

    def complete():
        for index, (completion, value, error) in enumerate(order):
            if index % 7 == 0:
                time.sleep(0.001)
            completion(value, error)

    thread = threading.Thread(target=complete, daemon=True)
    thread.start()
    return thread


def test_a_listener_runs_once_whether_added_before_or_after_the_result():
    calls = []
    before = Completion()
    before.when_done(lambda: calls.append("before"))
    before.when_done(lambda: calls.append("before, second"))
    assert calls == []
    before("v", None)
    assert calls == ["before", "before, second"]
    before.when_done(lambda: calls.append("after"))  # already done: at once, on this thread
    assert calls == ["before", "before, second", "after"]
    assert Pending(before)() == "v"


@pytest.fixture
def eager_switching():
    """Threads switch every microsecond, so racing steps interleave in many more ways than by default."""
    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_listeners_racing_the_result_are_each_called_exactly_once(eager_switching):
    # The listener is added on one thread while another delivers the result: whichever wins, it runs once.
    def deliver(start: threading.Barrier, completion: Completion, value: int) -> None:
        start.wait()
        completion(value, None)

    for round_ in range(3000):
        completion = Completion()
        calls: list[int] = []
        start = threading.Barrier(2)
        thread = threading.Thread(target=deliver, args=(start, completion, round_))
        thread.start()
        start.wait()
        completion.when_done(lambda calls=calls: calls.append(1))
        thread.join()
        assert calls == [1], f"round {round_}: listener called {len(calls)} times"
        assert completion.result(0) == round_  # and the result is readable by then, without blocking


def test_each_operation_gets_its_own_results_in_its_own_order():
    # 300 operations, 5 durable steps each, completed from another thread in a shuffled order: every operation sees
    # exactly the values of its own waits, step after step.
    steps = 5
    completions = {(op, step): Completion() for op in range(300) for step in range(steps)}

    def operation(op):
        seen = []
        for step in range(steps):
            seen.append((yield Pending(completions[op, step])))
        return seen

    items = [(c, (op, step), None) for (op, step), c in completions.items()]
    feeder = _complete_later(items)
    results = _in_thread(lambda: drive([operation(op) for op in range(300)]))
    feeder.join()
    assert results == [[(op, step) for step in range(steps)] for op in range(300)]


def test_an_error_reaches_only_the_operation_that_waited_for_it():
    completions = [Completion() for _ in range(50)]

    def operation(index):
        try:
            value = yield Pending(completions[index])
        except KeyError as exc:
            return f"caught {exc.args[0]}"
        return value

    def unhandled():
        yield Pending(completions[49])
        return "not reached"

    ops = [operation(i) for i in range(49)] + [unhandled()]
    items = [(c, i, KeyError(i) if i % 10 == 3 or i == 49 else None) for i, c in enumerate(completions)]
    feeder = _complete_later(items, seed=7)
    results = _in_thread(lambda: drive(ops))
    feeder.join()
    for index in range(49):
        assert results[index] == (f"caught {index}" if index % 10 == 3 else index)
    assert isinstance(results[49], KeyError)  # raised out of the operation: its result, not the driver's end


def test_finish_runs_on_the_driver_and_its_error_is_thrown_into_the_operation():
    done = Completion()
    threads = []

    def finish(value):
        threads.append(threading.current_thread())
        raise ValueError(f"applying {value} failed")

    def operation():
        try:
            yield Pending(done, finish)
        except ValueError as exc:
            return str(exc)

    def driver():
        return drive([operation()]), threading.current_thread()

    feeder = _complete_later([(done, "marker", None)])
    (result,), driver_thread = _in_thread(driver)
    feeder.join()
    assert result == "applying marker failed" and threads == [driver_thread]


def test_plain_waits_sleeps_and_nested_gathers_run_in_order():
    log = []

    def inner(name, completion):
        value = yield Pending(completion)
        log.append(name)
        return value

    first, second = Completion(), Completion()

    def operation():
        plain = yield (lambda: "plain")  # no when_done: called at once
        started = time.monotonic()
        yield Sleep(0.05)
        slept = time.monotonic() - started
        both = yield from gather_op([inner("a", first), inner("b", second)])
        return plain, slept, both

    def other():
        yield Sleep(0.01)
        first(1, None)
        second(2, None)
        return "other"

    (plain, slept, both), other_result = _in_thread(lambda: drive([operation(), other()]))
    assert plain == "plain" and slept >= 0.05 and both == [1, 2] and other_result == "other"
    assert sorted(log) == ["a", "b"]


def test_gather_op_under_run_gives_what_gather_gives():
    def ok(value):
        got = yield (lambda: value * 2)
        return got + 1

    def fails():
        yield (lambda: 1)
        raise ValueError("second step")

    assert run(gather_op([ok(1), fails(), ok(5)]))[::2] == gather([ok(1), fails(), ok(5)])[::2] == [3, 11]


def test_a_wait_that_never_completes_times_out_and_its_late_result_is_ignored():
    never, late, other = Completion(), Completion(), Completion()
    resumed = []

    def stuck():
        try:
            yield Pending(late, timeout=0.2, what="the stuck write")
        except TimeoutError as exc:
            resumed.append("timeout")
            message = str(exc)
        # waits again, on something else: the late completion of the first wait must not resume it
        value = yield Pending(never, timeout=-1)
        resumed.append("resumed twice")
        return message, value

    def finisher():
        yield Sleep(0.5)
        late("too late", None)  # after the timeout: ignored
        yield Sleep(0.1)
        never("now", None)
        value = yield Pending(other)
        return value

    def unblock():
        yield Sleep(0.7)
        other("done", None)

    results = _in_thread(lambda: drive([stuck(), finisher(), unblock()], check_every=0.05))
    assert results[0] == ("the stuck write not acknowledged within 0.2 s", "now")
    assert results[1] == "done"
    assert resumed == ["timeout", "resumed twice"]


def test_no_wake_up_is_lost_under_concurrent_completions(eager_switching):
    # Four drivers, 100 operations each, 20 steps each; three threads complete the waits as soon as they are
    # parked (or before), racing the drivers' registrations. Every operation must finish with every value.
    steps, per_driver, drivers = 20, 100, 4
    total = per_driver * drivers
    queues = [[Completion() for _ in range(steps)] for _ in range(total)]

    def operation(index):
        total_ = 0
        for completion in queues[index]:
            total_ += yield Pending(completion)
        return total_

    flat = [(c, 1, None) for q in queues for c in q]
    feeders = [_complete_later(flat[i::3], seed=i) for i in range(3)]
    outcomes: list = [None] * drivers

    def one(d):
        outcomes[d] = drive([operation(i) for i in range(d, total, drivers)])

    threads = [threading.Thread(target=one, args=(d,), daemon=True) for d in range(drivers)]
    for t in threads:
        t.start()
    for t in threads + feeders:
        t.join(60)
        assert not t.is_alive(), "a driver never finished: a wake-up was lost"
    assert all(result == steps for outcome in outcomes for result in outcome)


def test_an_operation_may_hold_a_lock_across_its_waits_without_stalling_the_others():
    # The engine's end holds the transaction's end lock across its writes: the driver keeps running the others.
    lock = threading.Lock()
    held, free = Completion(), Completion()

    def holder():
        with lock:
            yield Pending(held)
        return "released"

    def other():
        value = yield Pending(free)
        held("go", None)  # only reached if the driver ran this one while holder() held its lock
        return value

    feeder = _complete_later([(free, "free", None)])
    assert _in_thread(lambda: drive([holder(), other()])) == ["released", "free"]
    feeder.join()
    assert not lock.locked()


@pytest.mark.parametrize("drivers", [1, 3])
def test_the_workload_on_few_threads_runs_many_clients(tmp_path, drivers):
    from engine_helpers import open_engine
    from txnadmin.engine.workload import WorkloadSpec, run_workload

    engine = open_engine(tmp_path / "e", transactionLogBatchedWriteEnabled="true",
                         transactionPendingAckBatchedWriteEnabled="true")
    committed = []
    try:
        spec = WorkloadSpec(rate=0, concurrency=40, duration_s=1.5, drivers=drivers)
        peak = []

        def count_clients_threads(_stats):
            peak.append(sum(1 for t in threading.enumerate() if t.name.startswith("workload-")))

        stats = run_workload(engine, spec, on_progress=count_clients_threads,
                             on_commit=lambda txn, produced, acked: committed.append((txn, produced, acked)))
        assert stats.errors == 0, stats.last_error
        assert stats.committed == len(committed) > 40  # every client ran several transactions
        assert len({txn for txn, _, _ in committed}) == len(committed)
        assert max(peak) == drivers  # the clients share the drivers: no thread per client
        for txn, produced, _acked in committed:
            assert engine.coordinator(txn[0]).txns.get(txn[1]) is None  # ended, not left open
            assert len(produced) == spec.messages_per_txn
    finally:
        engine.close()


def test_a_stop_ends_a_rate_limited_workload_promptly(tmp_path):
    from engine_helpers import open_engine
    from txnadmin.engine.workload import WorkloadSpec, run_workload

    engine = open_engine(tmp_path / "e")
    try:
        stop = threading.Event()
        # 1 transaction per second over 8 clients: most clients sleep for seconds between their transactions
        spec = WorkloadSpec(rate=1, concurrency=8, duration_s=60)
        threading.Timer(1.0, stop.set).start()
        started = time.monotonic()
        stats = run_workload(engine, spec, stop)
        assert time.monotonic() - started < 3
        assert stats.errors == 0 and 1 <= stats.started <= 3
    finally:
        engine.close()
