"""Shared by the benchmarks: replace one `## ` section of docs/benchmarks.md, leaving the others alone."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def replace_section(header: str, section: str, path: Path = BENCHMARKS) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n\nNumbers measured on the project's 2-core machines.\n"
    if header in text:
        start = text.index(header)
        end = text.find("\n## ", start + len(header))
        rest = text[end + 1:] if end != -1 else ""
        text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
