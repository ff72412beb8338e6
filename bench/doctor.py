"""`txnadmin doctor` over many transactional subscriptions, through HTTP against a real `txnadmin serve`.

    python bench/doctor.py [--subscriptions 10000] [--concurrency 1,4,16,64] [--write-docs]

Builds an engine with N topics, each with a transactional subscription (N transaction buffers and N pending-ack
stores) and a handful of open transactions, serves it, then times a full `doctor` run (every check; one call per
buffer and per store, plus coordinators, metrics, config) sequentially — the baseline, what a script looping over
pulsar-admin calls does — and with bounded concurrency, same server, same run. Target: 10,000 in ≤ 30 s on 2 cores.
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

TARGET_SECONDS = 30.0


def build(directory: Path, subscriptions: int) -> float:
    from txnadmin.engine.config import EngineConfig
    from txnadmin.engine.engine import Engine

    t = time.perf_counter()
    config = EngineConfig()
    config.transactionCoordinatorCount = 4
    config.transactionPendingAckBatchedWriteEnabled = True
    config.engineBrokerVersion = "4.2.0"
    config.save(directory)
    engine = Engine(directory, EngineConfig.load(directory), maintenance=False)
    for i in range(subscriptions):
        topic = f"persistent://public/default/orders-{i}"
        engine.subscribe(topic, "billing")
        engine.store(topic, "billing")
    for i in range(8):  # a few long transactions: doctor reports them (info) and reads those topics' internal stats
        txn = engine.begin(3_600_000, owner=f"bench-{i}")
        engine.produce(txn, f"persistent://public/default/orders-{i}", b"pending")
        engine.publish(f"persistent://public/default/orders-{i}", b"after")
    engine.close()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    from txnadmin.admin.http import HttpAdmin
    from txnadmin.procedures import doctor

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "engine"
        built = build(directory, args.subscriptions)
        with served(directory, Path(tmp)) as (url, token, opened):
            admin = HttpAdmin(url, token=token)
            doctor.run(admin, url, concurrency=16)  # untimed warm-up
            rows = []
            for c in [int(x) for x in args.concurrency.split(",")]:
                t = time.perf_counter()
                report = doctor.run(admin, url, concurrency=c)
                secs = time.perf_counter() - t
                counts = report.counts()
                rows.append((c, secs, counts))
            admin.close()
    baseline = rows[0][1]
    table = Table(title=f"doctor over {args.subscriptions:,} transactional subscriptions via HTTP (txnadmin serve)")
    for col in ("concurrency", "seconds", "subscriptions/s", "speed-up vs sequential", "findings (c/w/u/i)"):
        table.add_column(col, justify="right")
    lines = []
    for c, secs, counts in rows:
        row = (str(c), f"{secs:0.2f}", f"{args.subscriptions / secs:0.0f}", f"{baseline / secs:0.1f}×",
               f"{counts['critical']}/{counts['warning']}/{counts['unknown']}/{counts['info']}")
        table.add_row(*row)
        lines.append(row)
    console = Console()
    console.print(table)
    best = min(secs for _, secs, _ in rows)
    verdict = "met" if best <= TARGET_SECONDS else "NOT met"
    console.print(f"setup: engine built in {built:0.1f} s, served after {opened:0.1f} s; target ≤ {TARGET_SECONDS:g} s: "
                  f"{verdict} (best {best:0.1f} s)")
    if args.write_docs:
        write_docs(lines, args.subscriptions, best, verdict)


def write_docs(rows, subscriptions: int, best: float, verdict: str) -> None:
    header = "## Doctor"
    body = [header, "", f"`python bench/doctor.py --subscriptions {subscriptions}`: a full `txnadmin doctor` (every "
            f"check) over {subscriptions:,} topics with one transactional subscription each ({subscriptions:,} "
            "transaction buffers and as many pending-ack stores), 4 coordinators and 8 open transactions, through "
            "HttpAdmin against a real `txnadmin serve` on the same 2-core machine; concurrency 1 is the baseline "
            "(one call after another), timed after one untimed warm-up run.", "",
            "| concurrency | seconds | subscriptions/s | speed-up vs sequential | findings (critical/warning/unknown/info) |",
            "|---|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in rows]
    body += ["", f"Target ≤ {TARGET_SECONDS:g} s: **{verdict}** in this run (best {best:0.1f} s)."]
    replace_section(header, "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
