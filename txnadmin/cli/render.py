"""Output shared by commands: the validated ``-o`` option, JSON/YAML, rich tables for any admin answer, and the
live workload view. Rich is imported lazily so `--help` and scripts (``-o json``) stay quick to start."""

from __future__ import annotations

import contextvars


class _WorkloadView:
    def __init__(self, engine):
        from rich.live import Live
        from rich.text import Text

        self.engine = engine
        self.live = Live(Text(""), refresh_per_second=4)
        self.last = (0.0, 0)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)

    def update(self, stats) -> None:
        from rich.text import Text

        from ..engine.observe import engine_summary

        summary = engine_summary(self.engine)
        elapsed, started = self.last
        rate = (stats.started - started) / (stats.elapsed_s - elapsed) if stats.elapsed_s > elapsed else 0.0
        self.last = (stats.elapsed_s, stats.started)
        lines = format_rows(
            ["TX/S", "OPEN", "COMMITTED", "ABORTED", "ERRORS", "TC ENTRIES", "REC/ENTRY", "TC LEDGERS"],
            [[f"{rate:0.0f}", str(summary["openTransactions"]), str(stats.committed), str(stats.aborted),
              str(stats.errors), str(summary["tcEntries"]), f"{summary['tcRecordsPerEntry']:0.1f}",
              f"{summary['tcLedgersMin']}/{summary['tcLedgersMax']}"]],
            title=f"txnadmin engine — {stats.elapsed_s:0.1f} s")
        self.live.update(Text("\n".join(lines)))  # plain text: wraps at the terminal's edge, never cut


def workload_view(engine) -> _WorkloadView:
    return _WorkloadView(engine)


# -- output formats shared by every command ----------------------------------------------------------------

FORMATS = ("table", "json", "yaml")

# -o yaml in txnadmin's own commands: they branch on "json" (machine output) vs "table", so the option hands them
# "json" and print_json writes the same document as YAML. Set by the option's callback on every invocation (and
# reset by the root command), so one in-process run never leaks into the next. -o wide and --no-headers likewise
# reach the command as "table" and are read by the table printer.
_machine_yaml = contextvars.ContextVar("txnadmin_machine_yaml", default=False)
_wide = contextvars.ContextVar("txnadmin_wide", default=False)
_no_headers = contextvars.ContextVar("txnadmin_no_headers", default=False)


def machine_yaml() -> bool:
    """True when this command was asked for -o yaml (its JSON documents are printed as YAML)."""
    return _machine_yaml.get()


def wide() -> bool:
    """True when this command was asked for -o wide (tables show their extra columns)."""
    return _wide.get()


def reset_machine_yaml() -> None:
    _machine_yaml.set(False)
    _wide.set(False)
    _no_headers.set(False)


def output_option(default: "str | None", formats: "tuple[str, ...] | None" = None, help: "str | None" = None,
                  with_wide: bool = False):
    """The ``-o/--output`` option, validated: an unknown format is a usage error, never a silent table.

    Without ``formats`` (txnadmin's own commands): table, json or yaml, where yaml reaches the command as "json"
    and :func:`txnadmin.cli._common.print_json` writes YAML. With ``formats`` the command handles each one itself.
    ``with_wide`` adds ``wide``: the table with its extra columns (it reaches the command as "table").
    """
    import typer

    folded = formats is None
    accepted: tuple[str, ...] = FORMATS if formats is None else formats
    if with_wide:
        accepted = (accepted[0], "wide", *accepted[1:])

    def check(value):
        if value is not None and value not in accepted:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(accepted)}")
        _wide.set(value == "wide")
        value = "table" if value == "wide" else value
        if folded:
            _machine_yaml.set(value == "yaml")
            return "json" if value == "yaml" else value
        return value

    if with_wide and help is None:
        help = f"{', '.join(accepted[:-1])} or {accepted[-1]} (wide: the table with its extra columns)."
    return typer.Option(default, "--output", "-o", help=help or f"{', '.join(accepted[:-1])} or {accepted[-1]}.",
                        callback=check)


def no_headers_option():
    """``--no-headers``: tables without their header line (and title), for grep and awk."""
    import typer

    def check(value: bool) -> bool:
        _no_headers.set(bool(value))
        return value

    return typer.Option(False, "--no-headers", help="Print tables without the header line and title.",
                        callback=check, expose_value=False)


def to_json(value) -> str:
    """The scripts' format: stable bytes for the same answer (indent 2, keys in the server's order)."""
    import json

    return json.dumps(value, indent=2)


def to_yaml(value) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n")


def human_value(key: str, value, compact: bool = False) -> str:
    """Cell text: true/false as Pulsar writes them, ISO time and age for epoch-millisecond timestamps (``compact``:
    the time alone), JSON for nested values, '-' for null. A timestamp past what a calendar holds stays a number."""
    import time as _time
    from datetime import datetime, timezone

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    lowered = key.lower()
    if isinstance(value, int) and value > 10**12 and ("timestamp" in lowered or lowered.endswith(("at", "time"))):
        try:
            when = datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        except (ValueError, OverflowError, OSError):  # past the year 9999 (int64 ms reach 292 million years)
            return str(value)
        if compact:
            return when
        when += " UTC"
        return f"{when} ({age(_time.time() * 1000 - value)} ago)" if value <= _time.time() * 1000 else when
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value)


# -- tables: kubectl's way ----------------------------------------------------------------------------------

def _plain(text: str) -> str:
    """A target's string as it is, but on one line and without control characters (no terminal escapes)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def format_rows(headers: "list[str]", rows: "list[list[str]]", notes: "list[list[str]] | None" = None,
                title: "str | None" = None, extra: int = 0) -> "list[str]":
    """Columns as kubectl prints them: every cell whole (a line runs past the terminal rather than cut an id), two
    spaces apart, no markup. ``notes[i]`` are lines printed under row i (reasons, suggested commands), indented.
    The last ``extra`` columns appear only with -o wide; --no-headers drops the header line and the title."""
    from rich.cells import cell_len

    if extra and not wide():
        headers = headers[:-extra]
        rows = [row[:-extra] for row in rows]
    cells = [[_plain(str(c)) for c in row] for row in rows]
    bare = _no_headers.get()
    widths = [max([cell_len(h) for h in ([] if bare else [headers[i]])] + [cell_len(r[i]) for r in cells] or [0])
              for i in range(len(headers))]

    def line(values: "list[str]") -> str:
        return "  ".join(v + " " * (w - cell_len(v)) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [] if bare or not title else [_plain(title)]
    if not bare:
        out.append(line(list(headers)))
    for i, row in enumerate(cells):
        out.append(line(row))
        out += ["    " + _plain(note) for note in (notes[i] if notes else [])]
    return out


def print_rows(headers: "list[str]", rows: "list[list[str]]", notes: "list[list[str]] | None" = None,
               title: "str | None" = None, extra: int = 0, err: bool = False) -> None:
    """:func:`format_rows`, printed."""
    import typer

    for line in format_rows(headers, rows, notes, title, extra):
        typer.echo(line, err=err)


def _mostly_scalars(obj: dict) -> bool:
    return sum(not isinstance(v, (dict, list)) for v in obj.values()) * 2 >= len(obj)


def counted(n: int, noun: str, plural: "str | None" = None) -> str:
    """3, 'transaction' -> '3 transactions'; 1 -> '1 transaction' (``plural`` where adding an s is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def age(ms: float) -> str:
    """1234567 → '20m 34s': ages people can read at a glance."""
    seconds = max(0, int(ms // 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            big, rest = divmod(seconds, size)
            small = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            return f"{big}{unit} {rest // small[1]}{small[0]}"
    return f"{seconds}s"


def render_table(value, title: "str | None" = None) -> None:
    """A view of any admin answer for people: scalars as aligned ``field: value`` lines, nested objects as titled
    sections, lists of objects as rows with one column per field. Nothing is cut and nothing is markup."""
    import typer
    from rich.cells import cell_len

    printed: list[str] = []  # sections after the first are set apart by a blank line

    def start(name: str) -> None:
        if printed:
            typer.echo("")
        printed.append(name)

    def rows_table(name: str, items: list) -> None:
        columns: list[str] = []
        for item in items:
            for k in item:
                if k not in columns:
                    columns.append(k)
        start(name)
        print_rows(columns, [[human_value(c, item.get(c), compact=True) for c in columns] for item in items],
                   title=name or None)

    def section(name: str, obj) -> None:
        if isinstance(obj, list):
            if obj and all(isinstance(i, dict) for i in obj):
                rows_table(name, obj)
            else:
                start(name)
                print_rows(["value"], [[human_value(name, item)] for item in obj], title=name or None)
            return
        if not isinstance(obj, dict):
            start(name)
            typer.echo(_plain(f"{name}: {human_value(name, obj)}" if name else human_value(name, obj)))
            return
        if len(obj) > 1 and all(isinstance(v, dict) and v and _mostly_scalars(v) for v in obj.values()):
            # a map of like records (stats per coordinator, metadata per transaction): one row each
            rows_table(name, [{"id": k, **v} for k, v in obj.items()])
            return
        scalars = {str(k): v for k, v in obj.items() if not isinstance(v, (dict, list)) or not v}
        if scalars or not obj:
            start(name)
            if name:
                typer.echo(_plain(name))
            width = max((cell_len(k) for k in scalars), default=0)
            for k, v in scalars.items():
                typer.echo(_plain(f"{k}:{' ' * (width - cell_len(k))}  {human_value(k, v)}"))
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                section(f"{name} › {k}" if name else str(k), v)

    section(title or "", value)
