"""How every command that aborts transactions reports it: `transactions abort`, `find-hanging --abort` and
`doctor --fix` all abort through one procedure (procedures/bulk_abort.abort_selected) and say each outcome, the
account at the end and an interrupted run's one line in the same words."""

from __future__ import annotations

from typing import Any, Callable, Optional

import typer

from .render import counted

SHOWN_IDS = 5  # ids named where a long list is summed up (the JSON document has them all)

# The procedure's outcomes (procedures/bulk_abort.py), as each is said when it is known.
SAID = {"ABORTED": "aborted", "ENDED": "ended by itself", "FAILED": "FAILED to abort",
        "UNKNOWN": "cannot tell whether aborted", "NOT_ATTEMPTED": "not attempted"}


def first_ids(ids: list[str]) -> str:
    return " ".join(ids[:SHOWN_IDS]) + (f" … and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


def outcome_line(result: dict) -> str:
    return f"{SAID[result['outcome']]} {result['txnId']}" + (f": {result['reason']}" if result.get("reason") else "")


def abort_rows(run: Callable[[Callable[[Any], list[dict]]], list[dict]], rows: list[dict],
               say: Optional[Callable[[str], None]], act: Optional[Callable[..., list[dict]]] = None) -> list[dict]:
    """Abort the planned ``rows`` (``run`` hands the procedure the target's admin), telling ``say`` each outcome as it
    is known (None: quietly), so that an interrupted run still leaves its account; Ctrl-C ends with that account in
    one line and exit 130. ``act(admin, on_outcome)``: a library call that aborts exactly ``rows`` (doctor's
    apply_fix); by default the abort procedure itself."""
    from ..admin.auth import mask
    from ..procedures.bulk_abort import abort_selected
    from ._common import EXIT_INTERRUPTED

    results: list[dict] = []

    def said(result: dict) -> None:
        results.append(result)
        if say is not None:
            say(mask(outcome_line(result)))

    try:
        if act is not None:
            return run(lambda admin: act(admin, said))
        return run(lambda admin: abort_selected(admin, rows, said))
    except KeyboardInterrupt:
        typer.echo(interrupted(rows, results), err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None  # said once: the root's bare "interrupted" would repeat it


def interrupted(rows: list[dict], results: list[dict]) -> str:
    """The one line an interrupted run leaves: what was done, what failed, the abort in flight, and how many were not
    attempted with the first of them (a run of hundreds would otherwise print them all on this line)."""
    done = sum(r["outcome"] in ("ABORTED", "ENDED") for r in results)
    failed = [r["txnId"] for r in results if r["outcome"] not in ("ABORTED", "ENDED")]
    in_flight = rows[len(results)]["txnId"] if len(results) < len(rows) else None
    rest = [r["txnId"] for r in rows[len(results) + 1:]]
    return (f"interrupted: {done} of {counted(len(rows), 'planned transaction')} aborted or ended"
            + (f"; {len(failed)} not aborted: {first_ids(failed)}" if failed else "")
            + (f"; {in_flight} may or may not be aborted" if in_flight else "")
            + (f"; {len(rest)} not attempted: {first_ids(rest)}" if rest else ""))


def account(results: list[dict], where: str, noun: str = "planned transaction") -> list[str]:
    """The lines that end a run: how many were aborted and ended by themselves, then every one NOT aborted."""
    from ..procedures.bulk_abort import summary

    counts = summary(results)
    ended = f"{counts['ENDED']} ended by {'itself' if counts['ENDED'] == 1 else 'themselves'} meanwhile"
    lines = [f"{counts['ABORTED']} of {counted(len(results), noun)} aborted on {where}, {ended}"]
    left = [r for r in results if r["outcome"] not in ("ABORTED", "ENDED")]
    if left:
        lines.append(f"NOT aborted ({len(left)}): " + ", ".join(f"{r['txnId']} ({SAID[r['outcome']]})" for r in left))
    return lines
