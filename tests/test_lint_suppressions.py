"""House rule behind `make check`: a `# noqa` or `# type: ignore` names what it silences and says why, on its line.

ruff (PGH004, RUF100) refuses blanket and unused noqa comments and mypy (ignore-without-code, warn_unused_ignores)
refuses uncoded and unused ignores; neither asks for a reason, so this test does.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("txnadmin", "tests", "bench", "proto", "examples")
GENERATED = ROOT / "txnadmin" / "codec" / "pb"  # protoc's output: fixed by regenerating, not by hand

# a noqa comment with its codes, or an ignore comment with its bracketed codes; then the rest of the line
SUPPRESSION = re.compile(r"#\s*(?:noqa(?P<noqa>:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?"
                         r"|type:\s*ignore(?P<ignore>\[[a-z0-9_, -]+\])?)(?P<rest>.*)$")
REASON = re.compile(r"[A-Za-z]{3,}")  # a word after the codes: "— fixed names", "# deliberate patch: ..."


def _suppressions(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        match = SUPPRESSION.search(line)
        if match:
            yield number, match


def problems_in(text: str) -> list[str]:
    out = []
    for number, match in _suppressions(text):
        if match.group(0).lstrip("# ").startswith("noqa"):
            coded = match.group("noqa")
        else:
            coded = match.group("ignore")
        if not coded:
            out.append(f"line {number}: names no code: {match.group(0)!r}")
        elif not REASON.search(match.group("rest")):
            out.append(f"line {number}: gives no reason after {coded.lstrip(': ')}: {match.group(0)!r}")
    return out


def test_every_suppression_names_its_code_and_a_reason():
    found = []
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.is_relative_to(GENERATED) or path == Path(__file__).resolve():
                continue
            found += [f"{path.relative_to(ROOT)}: {problem}" for problem in problems_in(path.read_text())]
    assert not found, "suppressions without a code or a reason:\n" + "\n".join(found)


def test_the_check_itself_tells_good_from_bad():
    assert problems_in("import x  # noqa: E402 — sys.path is set above\n") == []
    assert problems_in("x = f()  # type: ignore[attr-defined]  # stubs lack it\n") == []
    assert problems_in("except Exception:  # noqa: BLE001 - a sniffer that chokes claims nothing\n") == []
    assert problems_in("import x  # noqa: E402\n") != []
    assert problems_in("import x  # noqa\n") != []
    assert problems_in("x = f()  # type: ignore\n") != []
    assert problems_in("x = f()  # type: ignore[attr-defined]\n") != []
    assert problems_in("x = f()  # type: ignore  # because\n") != []
