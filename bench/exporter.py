"""`txnadmin exporter` polling 10,000 transactional subscriptions through a real `txnadmin serve`, scraped meanwhile.

    python bench/exporter.py [--subscriptions 10000] [--polls 3] [--doctor] [--write-docs]

Builds the same engine as bench/doctor.py (N topics with one transactional subscription each, 4 coordinators, 8 open
transactions), serves it, and runs the real `txnadmin exporter` process against it with back-to-back polls. Each
poll's duration is what the exporter itself reports (`txnadmin_poll_duration_seconds`). A scraper in this process
asks for /metrics every 0.1 s the whole time, so most scrapes land while a poll is running, and each scrape is timed
from the request to the last byte. Targets: a poll ≤ 10 s, every scrape ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _docs import replace_section
from _serve import served
from doctor import build
from rich.console import Console
from rich.table import Table

POLL_TARGET_S = 10.0
SCRAPE_TARGET_S = 0.050


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--polls", type=int, default=3, help="timed polls after the first (untimed) one")
    parser.add_argument("--doctor", action="store_true", help="export doctor's findings too (--doctor)")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    from txnadmin.server.run import free_port

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "engine"
        built = build(directory, args.subscriptions)
        with served(directory, Path(tmp)) as (url, token, opened):
            port = free_port()
            cmd = [sys.executable, "-m", "txnadmin.cli.main", "-u", url, "--auth-params", f"token:{token}",
                   "exporter", "--port", str(port), "--interval", "1"] + (["--doctor"] if args.doctor else [])
            exporter = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert exporter.stdout is not None
            exporter.stdout.readline()  # listening
            metrics = f"http://127.0.0.1:{port}/metrics"
            scrapes: list[float] = []
            polls: list[float] = []
            stop = threading.Event()

            def scraper() -> None:
                last_success = None
                seen = 0  # values of the success series: the exporter's start time, then each poll's end
                while not stop.is_set():
                    t = time.perf_counter()
                    with urllib.request.urlopen(metrics, timeout=30) as reply:
                        text = reply.read().decode()
                    scrapes.append(time.perf_counter() - t)
                    success = _sample(text, "txnadmin_last_poll_success_timestamp_seconds")
                    if success is not None and success != last_success:
                        seen += 1
                        if seen > 2:  # past the start time and the first poll, the warm-up
                            polls.append(_sample(text, "txnadmin_poll_duration_seconds") or float("nan"))
                        last_success = success
                    errors = _sample(text, "txnadmin_poll_errors_total")
                    if errors:
                        raise SystemExit(f"the exporter counted {errors:g} failed polls: "
                                         f"{exporter.stderr.read() if exporter.stderr else ''}")
                    stop.wait(0.1)

            thread = threading.Thread(target=scraper, daemon=True)
            t0 = time.perf_counter()
            thread.start()
            while len(polls) < args.polls and thread.is_alive():
                time.sleep(0.2)
            stop.set()
            thread.join(30)
            wall = time.perf_counter() - t0
            exporter.terminate()
            exporter.wait(timeout=60)
    load_after = os.getloadavg()
    scrapes.sort()
    p99 = scrapes[min(len(scrapes) - 1, int(len(scrapes) * 0.99))]
    table = Table(title=f"exporter over {args.subscriptions:,} transactional subscriptions via HTTP (txnadmin serve)"
                  + (" with --doctor" if args.doctor else ""))
    for col in ("what", "n", "median", "p99", "max", "target"):
        table.add_column(col, justify="right")
    poll_row = ("poll (s)", str(len(polls)), f"{statistics.median(polls):0.2f}", "", f"{max(polls):0.2f}",
                f"≤ {POLL_TARGET_S:g} s")
    scrape_row = ("scrape (ms)", str(len(scrapes)), f"{statistics.median(scrapes) * 1000:0.1f}", f"{p99 * 1000:0.1f}",
                  f"{scrapes[-1] * 1000:0.1f}", f"≤ {SCRAPE_TARGET_S * 1000:g} ms")
    table.add_row(*poll_row)
    table.add_row(*scrape_row)
    console = Console()
    console.print(table)
    poll_ok = max(polls) <= POLL_TARGET_S
    scrape_ok = scrapes[-1] <= SCRAPE_TARGET_S
    load = f"load average {load_before[0]:0.1f} before, {load_after[0]:0.1f} after"
    console.print(f"setup: engine built in {built:0.1f} s, served after {opened:0.1f} s; {wall:0.0f} s of polling; "
                  f"{load}; poll target {'met' if poll_ok else 'NOT met'}, scrape target "
                  f"{'met' if scrape_ok else 'NOT met'}")
    if args.write_docs:
        write_docs([poll_row, scrape_row], args, poll_ok, scrape_ok, load)


def write_docs(rows, args, poll_ok: bool, scrape_ok: bool, load: str) -> None:
    header = "## Exporter"
    body = [header, "", f"`python bench/exporter.py --subscriptions {args.subscriptions}"
            + (" --doctor" if args.doctor else "") + "`: the real `txnadmin exporter` process polling back to back "
            f"(`--interval 1`) the engine of the doctor bench ({args.subscriptions:,} topics with one transactional "
            "subscription each, 4 coordinators, 8 open transactions) through a real `txnadmin serve`, while the bench "
            "scrapes `/metrics` every 0.1 s; poll durations as the exporter reports them, the first poll untimed, "
            f"scrapes timed from request to last byte. Measured with {load}.", "",
            "| what | n | median | p99 | max | target |", "|---|---|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in rows]
    body += ["", f"Poll ≤ {POLL_TARGET_S:g} s: **{'met' if poll_ok else 'NOT met'}**; every scrape ≤ "
             f"{SCRAPE_TARGET_S * 1000:g} ms: **{'met' if scrape_ok else 'NOT met'}** (in this run)."]
    replace_section(header, "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
