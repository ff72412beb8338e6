"""Rich views shared by commands (live workload view)."""

from __future__ import annotations

from rich.live import Live
from rich.table import Table


class _WorkloadView:
    def __init__(self, engine):
        self.engine = engine
        self.live = Live(Table(), refresh_per_second=4)
        self.last = (0.0, 0)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)

    def update(self, stats) -> None:
        from ..engine.observe import engine_summary

        summary = engine_summary(self.engine)
        elapsed, started = self.last
        rate = (stats.started - started) / (stats.elapsed_s - elapsed) if stats.elapsed_s > elapsed else 0.0
        self.last = (stats.elapsed_s, stats.started)
        table = Table(title=f"txnadmin engine — {stats.elapsed_s:0.1f} s", show_header=True)
        for col in ("tx/s", "open txns", "committed", "aborted", "errors", "TC entries", "records/entry",
                    "TC ledgers (min/max)"):
            table.add_column(col, justify="right")
        table.add_row(
            f"{rate:0.0f}", str(summary["openTransactions"]), str(stats.committed), str(stats.aborted),
            str(stats.errors), str(summary["tcEntries"]), f"{summary['tcRecordsPerEntry']:0.1f}",
            f"{summary['tcLedgersMin']}/{summary['tcLedgersMax']}",
        )
        self.live.update(table)


def workload_view(engine) -> _WorkloadView:
    return _WorkloadView(engine)
