"""Output shared by commands: the validated ``-o`` option, JSON/YAML, rich tables for any admin answer, and the
live workload view. Rich is imported lazily so `--help` and scripts (``-o json``) stay quick to start."""

from __future__ import annotations

import contextvars


class _WorkloadView:
    def __init__(self, engine):
        from rich.live import Live
        from rich.table import Table

        self.engine = engine
        self.live = Live(Table(), refresh_per_second=4)
        self.last = (0.0, 0)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)

    def update(self, stats) -> None:
        from rich.table import Table

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


# -- output formats shared by every command ----------------------------------------------------------------

FORMATS = ("table", "json", "yaml")

# -o yaml in txnadmin's own commands: they branch on "json" (machine output) vs "table", so the option hands them
# "json" and print_json writes the same document as YAML. Set by the option's callback on every invocation (and
# reset by the root command), so one in-process run never leaks into the next.
_machine_yaml = contextvars.ContextVar("txnadmin_machine_yaml", default=False)


def machine_yaml() -> bool:
    """True when this command was asked for -o yaml (its JSON documents are printed as YAML)."""
    return _machine_yaml.get()


def reset_machine_yaml() -> None:
    _machine_yaml.set(False)


def output_option(default: "str | None", formats: "tuple[str, ...] | None" = None, help: "str | None" = None):
    """The ``-o/--output`` option, validated: an unknown format is a usage error, never a silent table.

    Without ``formats`` (txnadmin's own commands): table, json or yaml, where yaml reaches the command as "json"
    and :func:`txnadmin.cli._common.print_json` writes YAML. With ``formats`` the command handles each one itself.
    """
    import typer

    folded = formats is None
    accepted: tuple[str, ...] = FORMATS if formats is None else formats

    def check(value):
        if value is not None and value not in accepted:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(accepted)}")
        if folded:
            _machine_yaml.set(value == "yaml")
            return "json" if value == "yaml" else value
        return value

    return typer.Option(default, "--output", "-o", help=help or f"{', '.join(accepted[:-1])} or {accepted[-1]}.",
                        callback=check)


def to_json(value) -> str:
    """The scripts' format: stable bytes for the same answer (indent 2, keys in the server's order)."""
    import json

    return json.dumps(value, indent=2)


def to_yaml(value) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n")


def human_value(key: str, value) -> str:
    """Cell text: yes/no for booleans, ISO time and age for epoch-millisecond timestamps, '-' for null."""
    import time as _time
    from datetime import datetime, timezone

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    lowered = key.lower()
    if isinstance(value, int) and value > 10**12 and ("timestamp" in lowered or lowered.endswith(("at", "time"))):
        when = datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{when} ({age(_time.time() * 1000 - value)} ago)" if value <= _time.time() * 1000 else when
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _mostly_scalars(obj: dict) -> bool:
    return sum(not isinstance(v, (dict, list)) for v in obj.values()) * 2 >= len(obj)


def age(ms: float) -> str:
    """1234567 → '20m 34s': ages people can read at a glance."""
    seconds = max(0, int(ms // 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            big, rest = divmod(seconds, size)
            small = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            return f"{big}{unit} {rest // small[1]}{small[0]}"
    return f"{seconds}s"


def render_table(value, title: "str | None" = None, console=None) -> None:
    """A rich view of any admin answer: scalars as a field/value table, nested objects as titled sections, lists of
    objects as rows with one column per field."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()

    def rows_table(name: str, items: list) -> Table:
        columns: list[str] = []
        for item in items:
            for k in item:
                if k not in columns:
                    columns.append(k)
        table = Table(title=name, title_justify="left")
        for column in columns:
            table.add_column(column)
        for item in items:
            table.add_row(*(human_value(c, item.get(c)) for c in columns))
        return table

    def section(name: str, obj) -> None:
        if isinstance(obj, list):
            if obj and all(isinstance(i, dict) for i in obj):
                console.print(rows_table(name, obj))
            else:
                table = Table(title=name, title_justify="left")
                table.add_column("value")
                for item in obj:
                    table.add_row(human_value(name, item))
                console.print(table)
            return
        if not isinstance(obj, dict):
            console.print(f"{name}: {human_value(name, obj)}" if name else human_value(name, obj))
            return
        if len(obj) > 1 and all(isinstance(v, dict) and v and _mostly_scalars(v) for v in obj.values()):
            # a map of like records (stats per coordinator, metadata per transaction): one row each
            console.print(rows_table(name, [{"": k, **v} for k, v in obj.items()]))
            return
        scalars = {k: v for k, v in obj.items() if not isinstance(v, (dict, list)) or not v}
        if scalars or not obj:
            table = Table(title=name or None, title_justify="left", show_header=True)
            table.add_column("field")
            table.add_column("value")
            for k, v in scalars.items():
                table.add_row(str(k), human_value(str(k), v))
            console.print(table)
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                section(f"{name} › {k}" if name else str(k), v)

    section(title or "", value)
