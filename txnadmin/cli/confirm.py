"""Plan, then ask: the one way a cluster-wide command confirms before it acts.

Every command that changes a whole cluster (``downgrade start``, ``upgrade``, ``set-*-batch-log --reload``,
``find-hanging --abort``, ``transactions abort``,
``doctor --fix``) builds a :class:`Plan` and calls :func:`confirm` before its first change:

- the plan (what, on which target and where that target came from, how many things it touches) is printed;
- ``--dry-run``: nothing more happens, :func:`confirm` returns ``False`` and the command exits 0 having changed nothing;
- ``--yes``: no question, :func:`confirm` returns ``True``;
- otherwise, on a terminal, the operator is asked ``Proceed? [y/N]``; anything but yes exits 1 ("nothing changed");
- otherwise (piped, cron, CI): refuse with exit 2, because a script must say ``--yes`` to act.

Usage in a command::

    from .confirm import DryRunOpt, Plan, YesOpt, confirm

    def cmd(..., yes: bool = YesOpt, dry_run: bool = DryRunOpt, output: str = ...):
        plan = Plan("disable PIP-160 batching", target.label, ["unload 4 coordinators", "unload 120 topics"])
        if not confirm(plan, yes=yes, dry_run=dry_run, output=output):
            return  # dry run: plan printed, nothing changed

With ``-o json`` the plan goes to stderr so stdout stays one JSON document — except on ``--dry-run``, where the
plan *is* the result and is printed to stdout as JSON (``{"dryRun": true, "plan": {...}}``). With ``--yes`` as well,
nobody reads that plan to decide: a plan with a ``summary`` prints the summary there instead of every step (the
command's JSON document carries the whole plan).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional

import typer

from ._common import EXIT_FAILURE, EXIT_USAGE, print_json

YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask; act on the plan (needed when not on a terminal).")
DryRunOpt = typer.Option(False, "--dry-run", help="Print the plan and change nothing.")


@dataclass
class Plan:
    """What a command is about to do. ``target`` says which cluster and why (e.g. ``http://b:8080 (from -u)``)."""

    action: str
    target: str
    steps: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # machine-readable counts for the JSON form
    summary: Optional[list[str]] = None  # a few lines in place of the steps where nobody decides on them

    def to_json(self) -> dict:
        return {"action": self.action, "target": self.target, "steps": list(self.steps), **self.details}

    def lines(self, brief: bool = False) -> list[str]:
        head = [f"plan: {self.action}", f"  target: {self.target}"]
        if brief and self.summary is not None:
            return head + [f"  {line}" for line in self.summary] + ["  (every step: the plan in the JSON document)"]
        return head + [f"  - {step}" for step in self.steps]


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def confirm(plan: Plan, *, yes: bool, dry_run: bool, output: str = "table",
            interactive: Optional[bool] = None) -> bool:
    """Show ``plan``; return True to proceed, False on ``--dry-run``; exit 1 on "no", exit 2 when it cannot ask.

    ``interactive`` overrides terminal detection (tests); by default it is ``sys.stdin.isatty()``.
    """
    as_json = output == "json"
    if dry_run:
        if as_json:
            print_json({"dryRun": True, "plan": plan.to_json()})  # YAML under -o yaml
        else:
            for line in plan.lines():
                typer.echo(line)
            typer.echo("dry run: nothing was changed")
        return False
    for line in plan.lines(brief=as_json and yes):
        typer.echo(line, err=as_json)
    if yes:
        return True
    if not (_stdin_is_terminal() if interactive is None else interactive):
        typer.echo("error: refusing to act without confirmation: not on a terminal; pass --yes to proceed "
                   "(or --dry-run to only print the plan)", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        answer = typer.prompt("Proceed? [y/N]", default="", show_default=False, err=True)
    except (EOFError, typer.Abort, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        typer.echo("nothing changed", err=True)
        raise typer.Exit(EXIT_FAILURE)
    return True
