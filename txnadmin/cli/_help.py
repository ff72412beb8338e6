"""Help screens that never cut an option name or value, and prose without hard line breaks.

Typer's rich help squeezes every column of the options table to the terminal and ends what does not fit with "…"
(`--tls-enable-hostname-veri…`). Here the name and type columns never wrap and no word of the help column is cut.
When the table cannot fit the terminal that way, its rows are stacked instead: names, flags and type on a line of
their own, the help indented under them, so a 60-column terminal shows every option whole and nothing runs past
its edge. Only what cannot fit even then (a single word wider than the terminal) makes lines run long, as kubectl's
do. Docstring paragraphs are joined into one line each, so the terminal, not the source file, decides where they
break.
"""

from __future__ import annotations

import functools
from typing import Any


def install() -> None:
    """Wrap Typer's help rendering (rich is imported only when help is actually shown)."""
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        original = cls.format_help

        def format_help(self, ctx, formatter, _original=original):
            _patch_rich_help()
            return _original(self, ctx, formatter)

        cls.format_help = format_help  # type: ignore[method-assign]  # Typer has no hook for the help console


def _unwrap(paragraph: str) -> str:
    """One source paragraph as one line; lists and Typer's no-rewrap marker (\\b) keep their lines."""
    lines = paragraph.split("\n")
    if paragraph.lstrip().startswith("\b") or any(line.lstrip().startswith(("- ", "* ", "• ")) for line in lines):
        return paragraph
    return " ".join(line.strip() for line in lines if line.strip())


@functools.cache  # once per process: the first help screen patches Typer's renderer
def _patch_rich_help() -> None:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.panel import Panel
    from rich.table import Table
    from typer import rich_utils

    class HelpConsole(Console):
        """Never narrower than what its content needs without cutting a word: a long line beats a cut name."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            need = max((_needs(self, o) for o in objects if not isinstance(o, str)), default=0)
            if need <= self.width:
                return super().print(*objects, **kwargs)
            objects = tuple(_stacked(o) if _is_table_panel(o) else o for o in objects)
            need = max((_needs(self, o) for o in objects if not isinstance(o, str)), default=0)
            if need <= self.width:
                return super().print(*objects, **kwargs)
            width = self.width
            self.width = need
            try:
                super().print(*objects, **kwargs)
            finally:
                self.width = width

    def _is_table_panel(renderable: Any) -> bool:
        return (isinstance(renderable, Panel) and isinstance(renderable.renderable, Table)
                and len(renderable.renderable.columns) > 1)

    def _stacked(original: Panel) -> Panel:
        """A table panel's rows one under another: the row's names, flags and type on one line, its help (the last
        column) indented under it. Its narrowest width is the longest such line or help word, plus the indent."""
        from rich.padding import Padding
        from rich.text import Text

        table = original.renderable
        assert isinstance(table, Table)
        grid = Table.grid(expand=True)
        grid.add_column(min_width=0)
        widest = 0
        for row in range(table.row_count):
            cells = [column._cells[row] for column in table.columns]
            head = Text(" ").join(c if isinstance(c, Text) else Text(str(c)) for c in cells[:-1]
                                  if (c.plain if isinstance(c, Text) else str(c)).strip())
            head.no_wrap = True
            grid.add_row(head)
            grid.add_row(Padding(cells[-1], (0, 0, 0, STACK_INDENT)))
            widest = max(widest, _widest_line(head), _longest_word(cells[-1]) + STACK_INDENT)
        grid.columns[0].min_width = widest  # the help's Columns measure as 0 wide: say what it needs
        return Panel(grid, title=original.title, title_align=original.title_align,
                     border_style=original.border_style)

    def _needs(console: Console, renderable: Any) -> int:
        """The narrowest width that cuts no word; a panel counts its content (its own measure stops at the width)."""
        edges = 0
        while isinstance(renderable, Panel):
            edges += 4  # two borders, one space of padding each side
            renderable = renderable.renderable
        unbounded = console.options.update(width=10**4)
        return Measurement.get(console, unbounded, renderable).minimum + edges

    def console(stderr: bool = False) -> Console:
        return HelpConsole(theme=_theme(rich_utils), highlighter=rich_utils.highlighter,
                           color_system=rich_utils.COLOR_SYSTEM, force_terminal=rich_utils.FORCE_TERMINAL,
                           width=rich_utils.MAX_WIDTH, stderr=stderr)

    def panel(renderable: Any, *args: Any, **kwargs: Any) -> Panel:
        if isinstance(renderable, Table) and len(renderable.columns) > 1:
            for column in renderable.columns[:-1]:  # names, flags and types (whole); the last column is the prose
                column.no_wrap = True
                column.min_width = max((_widest_line(cell) for cell in column._cells), default=0) or None
            prose = renderable.columns[-1]  # Typer puts it in Columns, which rich measures as 0 wide: say it
            prose.min_width = max((_longest_word(cell) for cell in prose._cells), default=0) or None
        return Panel(renderable, *args, **kwargs)

    def fix_linebreaks(paragraphs: list[str], markup_mode: Any) -> str:
        return "\n\n".join(_unwrap(p) for p in paragraphs)

    rich_utils._get_rich_console = console
    rich_utils.Panel = panel  # type: ignore[assignment,misc]  # only the help panels are built through this name
    rich_utils._fix_linebreaks = fix_linebreaks


STACK_INDENT = 4  # a stacked row's help, under its names


def _theme(rich_utils: Any):
    from rich.theme import Theme

    return Theme({"option": rich_utils.STYLE_OPTION, "switch": rich_utils.STYLE_SWITCH,
                  "negative_option": rich_utils.STYLE_NEGATIVE_OPTION,
                  "negative_switch": rich_utils.STYLE_NEGATIVE_SWITCH, "types": rich_utils.STYLE_TYPES,
                  "types_sep": rich_utils.STYLE_TYPES_SEPARATOR, "usage": rich_utils.STYLE_USAGE})


def _longest_word(cell: Any) -> int:
    from rich.cells import cell_len

    parts = getattr(cell, "renderables", None) or [cell]
    return max((cell_len(word) for part in parts for word in getattr(part, "plain", str(part)).split()), default=0)


def _widest_line(cell: Any) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in getattr(cell, "plain", str(cell)).split("\n")), default=0)
