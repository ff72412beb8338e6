"""`downgrade status` over many pending-ack stores, through HTTP against a real `txnadmin serve`.

    python bench/downgrade_status.py [--stores 10000] [--concurrency 1,2,4,16,64] [--worst-case] [--write-docs]
    python bench/downgrade_status.py --brokers 1,3 [--stores 10000] [--write-docs]

Builds an engine with N topics, each with a transactional subscription (so N pending-ack stores),
serves it, runs `downgrade start` once, then times `status` sequentially (the baseline: what a
script looping over pulsar-admin calls does) and with bounded concurrency — same server, same run.
Then, at concurrency 16: the old per-store evidence alone (reference), a poll after every log rolled
over (stores already seen done: one call each), and the worst case, every log rolled over and none
seen done yet (two calls each: ledgers, then recoverStartTime). ``--worst-case`` times only the
usual poll and the worst case at 16, three times each, alternating (a short run that still compares
the two in the same run), each also with the client before #14's keep-alive path (httpx's transport for
every call), against the same server: a before/after measured under the same load; then the same two polls through
`wait`'s session (its watch running), and through the CLI as an operator runs it (a fresh process each time).
``--brokers 1,3`` builds the same stores once per broker count (engineBrokers=N, served by `txnadmin serve`: one
listener per broker, the client entering at the first, as `-u local:DIR` does) and times the usual poll and the worst
case at concurrency 16 on each, three rounds, alternating, each with a fresh client (what `downgrade status`, a
process per poll, is) and with the client kept from the poll before (what `downgrade wait`'s session is): a fresh
client's calls land mostly on a broker that does not own the store and are redirected (307) to its owner, as on a
real cluster; a kept one goes straight to the owner its last redirect named.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _docs import replace_section
from _serve import served
from rich.console import Console
from rich.table import Table


def build(directory: Path, stores: int, brokers: int = 1) -> float:
    from txnadmin.engine.config import EngineConfig
    from txnadmin.engine.engine import Engine

    t = time.perf_counter()
    config = EngineConfig()
    config.engineBrokers = brokers  # owners are placed when served: the stores are the same whatever the count
    config.transactionCoordinatorCount = 4
    config.transactionPendingAckBatchedWriteEnabled = True
    config.save(directory)
    engine = Engine(directory, EngineConfig.load(directory), maintenance=False)
    for i in range(stores):
        topic = f"persistent://public/default/orders-{i}"
        engine.subscribe(topic, "billing")
        engine.store(topic, "billing")
    engine.close()
    return time.perf_counter() - t


def forget_confirmed(state: Path, proven: bool = False) -> None:
    """Make the next poll see every log as rolled over since the last one (its newest ledger is not the one
    confirmed); with ``proven``, also as never seen done, so each store needs both of its calls."""
    from txnadmin.procedures.downgrade.checklist import load_state, save_state

    data = load_state(state)
    assert data is not None
    for bucket in ("coordinators", "pendingAckStores"):
        for rec in data[bucket].values():
            rec["confirmedLedger"] = None
            if proven:
                rec.pop("provenDone", None)
    save_state(state, data)  # with its digest: the checklist refuses a file edited outside txnadmin


class HttpxTransportAdmin:
    """HttpAdmin as it was before its plain-http keep-alive path: httpx's transport on every thread."""

    def __new__(cls, url: str, token: str):
        from txnadmin.admin.http import HttpAdmin

        class Before(HttpAdmin):
            def _thread_transport(self):
                return self._httpx_transport()

        return Before(url, token=token)


def cli_status(url: str, token: str, state: Path, rows: list, label: str) -> None:
    """Time the CLI itself (`-o json`: no table to draw); exit 1 (not yet) is the expected answer here."""
    import json
    import subprocess

    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "txnadmin", "--token", token, "-u", url, "downgrade", "status",
                           "--state", str(state), "-o", "json"], capture_output=True, text=True)
    took = time.perf_counter() - t
    if done.returncode not in (0, 1):
        raise SystemExit(f"downgrade status exited {done.returncode}: {done.stderr.strip()[:300]}")
    rows.append((label, took, int(json.loads(done.stdout)["logs"])))


ROLLED = "16, every log rolled, seen done before (1 call each)"
WORST = "16, worst case: every log rolled, none seen done yet (2 calls each)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", type=int, default=10_000)
    parser.add_argument("--concurrency", default="1,2,4,16,64")
    parser.add_argument("--worst-case", action="store_true",
                        help="only the usual poll and the worst case at concurrency 16, 3 rounds, alternating")
    parser.add_argument("--without-old-client", action="store_true",
                        help="with --worst-case: leave out the rows of the client before #14 (their garbage and "
                             "connections are then not in the way of the rows after them)")
    parser.add_argument("--brokers", default="", help="broker counts to compare, e.g. 1,3: the usual poll and the "
                                                       "worst case at concurrency 16 on an engine of each")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.brokers:
        return compare_brokers(args, [int(b) for b in args.brokers.split(",") if b])
    from txnadmin.admin.http import HttpAdmin
    from txnadmin.procedures.downgrade import start, status

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "engine"
        built = build(directory, args.stores)
        with served(directory, Path(tmp)) as (url, token, opened):
            admin = HttpAdmin(url, token=token)
            state = Path(tmp) / "state.json"
            t = time.perf_counter()
            recorded = start(admin, state, target=url, concurrency=16)  # as the CLI records it
            started = time.perf_counter() - t
            status(admin, state, concurrency=16)  # untimed warm-up, so the first timed row is not also the coldest
            rows = []

            def timed(label: str, concurrency: int = 16, client=admin, session=None) -> None:
                t = time.perf_counter()
                report = status(client, state, concurrency=concurrency, session=session)
                rows.append((label, time.perf_counter() - t, len(report.logs)))

            if args.worst_case:
                before = HttpxTransportAdmin(url, token)
                for _ in range(3):
                    clients = ((before, "httpx transport (before)"), (admin, "keep-alive (after)"))
                    for client, label in clients[1:] if args.without_old_client else clients:
                        timed(f"16, usual poll, {label}", client=client)
                        forget_confirmed(state, proven=True)
                        timed(f"16, worst case, {label}", client=client)
                # What `wait` polls with (#24): its watch reads every broker's flags and counters every 2 s in the
                # background, and each poll reads them once more before and after its logs.
                from txnadmin.procedures.downgrade import Session
                from txnadmin.procedures.downgrade.checklist import baselines_of, load_state

                session = Session(admin, url, baselines_of(load_state(state) or {}))
                session.start_watching()
                try:
                    for _ in range(3):
                        timed("16, usual poll, wait with its watch", session=session)
                        forget_confirmed(state, proven=True)
                        timed("16, worst case, wait with its watch", session=session)
                finally:
                    session.close()
                # What an operator runs: `txnadmin downgrade status` as a fresh process (start-up, checklist load
                # and a fresh heap included), after the rows above so it is not timed right behind `start`.
                for _ in range(3):
                    cli_status(url, token, state, rows, "16, usual poll, `txnadmin downgrade status` process")
                    forget_confirmed(state, proven=True)
                    cli_status(url, token, state, rows, "16, worst case, `txnadmin downgrade status` process")
                    status(admin, state, concurrency=16)  # untimed: `status` saves nothing, so prove the logs again
                before.close()
                admin.close()
                return report_rows(rows, args, built, opened, started, recorded)
            for c in [int(x) for x in args.concurrency.split(",")]:
                t = time.perf_counter()
                report = status(admin, state, concurrency=c)
                rows.append((str(c), time.perf_counter() - t, len(report.logs)))
            # Same run, same load: what the old status did per store (internal stats only, no identity, no
            # broker checks, no recoverStartTime), as the comparison for the evidence added since.
            from concurrent.futures import ThreadPoolExecutor

            stores = [(v["topic"], v["subscription"]) for v in recorded["pendingAckStores"].values()]
            t = time.perf_counter()
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(lambda ts: admin.pending_ack_internal_stats(*ts), stores))
            rows.append(("16, old evidence only (reference)", time.perf_counter() - t, len(stores)))
            # Every log's newest ledger changed since the last poll (all rolled over): a store seen done before
            # is still asked only whether it reopened; one never seen done needs its ledgers and recoverStartTime.
            forget_confirmed(state)
            timed(ROLLED)
            forget_confirmed(state, proven=True)
            timed(WORST)
            admin.close()
    report_rows(rows, args, built, opened, started, recorded)


BROKERS_HEADER = "## Downgrade status across brokers"
ROUNDS = 3


# Each poll of --brokers: (every log rolled and none seen done first, the client kept from the poll before). A fresh
# client is what `downgrade status` is (a process per poll); a kept one is `downgrade wait`'s session, which knows from
# its last poll which broker owns each topic.
POLLS = {
    "usual poll (1 call each), fresh client": (False, False),
    "worst case: every log rolled, none seen done yet (2 calls each), fresh client": (True, False),
    "usual poll, client kept from the poll before (as `wait`)": (False, True),
    "worst case, client kept from the poll before (as `wait`)": (True, True),
}


def compare_brokers(args, counts: list[int]) -> None:
    """The usual poll and the worst case at concurrency 16, on an engine of each broker count, same stores."""
    import os
    import statistics

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.procedures.downgrade import start, status

    console = Console(width=max(Console().width, 130))
    load_before = os.getloadavg()[0]
    results: list[tuple[int, str, list[float], int]] = []
    setup: list[str] = []
    for brokers in counts:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / "engine"
            built = build(directory, args.stores, brokers)
            with served(directory, Path(tmp)) as (url, token, opened):
                admin = HttpAdmin(url, token=token)
                state = Path(tmp) / "state.json"
                t = time.perf_counter()
                start(admin, state, target=url, concurrency=16)
                started = time.perf_counter() - t
                status(admin, state, concurrency=16)  # untimed warm-up (also of the kept client)
                polls: dict[str, list[float]] = {name: [] for name in POLLS}
                logs = 0
                for _ in range(ROUNDS):
                    for name, (proven, kept) in POLLS.items():
                        if proven:
                            forget_confirmed(state, proven=True)
                        client = admin if kept else HttpAdmin(url, token=token)  # a fresh one: a `status` process
                        t = time.perf_counter()
                        logs = len(status(client, state, concurrency=16).logs)
                        polls[name].append(time.perf_counter() - t)
                        if not kept:
                            client.close()
                admin.close()
            results += [(brokers, name, times, logs) for name, times in polls.items()]
            setup.append(f"{brokers} broker{'' if brokers == 1 else 's'}: built in {built:0.1f} s, served after "
                         f"{opened:0.1f} s, `downgrade start` {started:0.1f} s")
            console.print(results[-len(POLLS):])
    load_after = os.getloadavg()[0]
    first = {poll: statistics.median(times) for brokers, poll, times, _ in results if brokers == counts[0]}
    columns = ("brokers", "poll at concurrency 16", "logs checked", "median seconds", "rounds (s)", "logs/s",
               f"vs {counts[0]} broker{'' if counts[0] == 1 else 's'}", "within 10 s")
    table = Table(title=f"downgrade status over {args.stores:,} pending-ack stores, by broker count (same run)")
    for col in columns:
        table.add_column(col, justify="right")
    lines = []
    for brokers, poll, times, logs in results:
        median = statistics.median(times)
        row = (str(brokers), poll, f"{logs:,}", f"{median:0.2f}", ", ".join(f"{t:0.2f}" for t in times),
               f"{logs / median:0.0f}", f"{median / first[poll]:0.2f}×", "yes" if median <= 10 else "no")
        table.add_row(*row)
        lines.append(row)
    console.print(table)
    for line in setup:
        console.print(line)
    console.print(f"1-minute load average {load_before:.1f} before, {load_after:.1f} after")
    if args.write_docs:
        body = [BROKERS_HEADER, "",
                f"`python bench/downgrade_status.py --brokers {args.brokers} --stores {args.stores}`, "
                f"{time.strftime('%Y-%m-%d')}: `downgrade status` over {args.stores:,} pending-ack stores plus 4 "
                "coordinators through HttpAdmin against a real `txnadmin serve` of an engine of each broker count "
                "(one listener per broker; the client enters at the first and follows each 307 to the owner), "
                f"concurrency 16, {ROUNDS} rounds each after one untimed warm-up, one engine after the other in the "
                "same run, on the shared 2-core machine (1-minute load average "
                f"{load_before:.1f} before, {load_after:.1f} after). Setup: {'; '.join(setup)}.", "",
                "| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]
        body += ["| " + " | ".join(r) + " |" for r in lines]
        replace_section(BROKERS_HEADER, "\n".join(body) + "\n")
        console.print(f"recorded in docs/benchmarks.md ({BROKERS_HEADER})")


def report_rows(rows, args, built: float, opened: float, started: float, recorded: dict) -> None:
    baseline = rows[0][1]
    table = Table(title=f"downgrade status over {args.stores:,} pending-ack stores via HTTP (txnadmin serve)")
    for col in ("concurrency", "logs checked", "seconds", "logs/s", "speed-up vs sequential"):
        table.add_column(col, justify="right")
    lines = []
    for c, secs, logs in rows:
        row = (c, f"{logs:,}", f"{secs:0.2f}", f"{logs / secs:0.0f}", f"{baseline / secs:0.1f}×")
        table.add_row(*row)
        lines.append(row)
    console = Console(width=max(Console().width, 130))  # the row labels stay on one line in a log file
    console.print(table)
    console.print(f"setup: engine built in {built:0.1f} s, served after {opened:0.1f} s; `downgrade start` "
                  f"(flags, {len(recorded['pendingAckStores']):,} unloads, recording) took {started:0.1f} s")
    if args.write_docs and not args.worst_case:  # the docs table is the full run's
        write_docs(lines, args.stores, started)


def write_docs(rows, stores: int, started: float) -> None:
    header = "## Downgrade status"
    body = [header, "", f"`python bench/downgrade_status.py --stores {stores}`: `downgrade status` over {stores:,} "
            "pending-ack stores plus 4 coordinators, through HttpAdmin against a real `txnadmin serve` on the same "
            "2-core machine; concurrency 1 is the baseline (one call after another, as a shell loop over pulsar-admin "
            "would do, minus the JVM start per call), timed after one untimed warm-up pass.", "",
            "| concurrency | logs checked | seconds | logs/s | speed-up vs sequential |", "|---|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in rows]
    body += ["", f"`downgrade start` on the same target (disable, unload every topic, record) took {started:0.1f} s."]
    replace_section(header, "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
