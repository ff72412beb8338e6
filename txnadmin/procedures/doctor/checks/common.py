"""What several checks share: ages as people read them, a transaction's times as the coordinator sent them, and
the finding every transaction check gives when coordinators are switched off."""

from __future__ import annotations

import shlex
from typing import Optional

from ....admin.batchlog import THRESHOLDS_NOT_DYNAMIC, broker_conf_lines

from ..knowledge import KNOWN_BUGS, first_fixed, fixed_text, is_fixed, release
from ..report import Finding, unknown
from ..survey import Survey


def age_text(ms: Optional[float]) -> str:
    """An age as people read it. The target's ``Date`` is whole seconds, so an age under a second may come out
    negative: that is ``<1s`` (the JSON keeps the raw ms); a larger negative is clocks that disagree, and says so."""
    if ms is None:
        return "unknown"
    if ms < 1000:
        return "<1s" if ms > -1000 else f"{age_text(-ms)} in the future (the brokers' clocks disagree)"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def is_local(s: Survey) -> bool:
    """The target is the embedded engine opened in this process (``local:PATH``): no broker to unload or upgrade."""
    return s.target.startswith("local:")


def engine_dir(s: Survey) -> str:
    """The engine directory of a ``local:PATH`` target, quoted for a command line."""
    return shlex.quote(s.target[len("local:"):])


def reload_fix(s: Survey, topic: str, what: str) -> str:
    """How to make ``topic`` (a topic, or a coordinator's assign partition) load again, for this kind of target."""
    if is_local(s):
        return (f"reopen {what}: stop the engine running there (Ctrl-C) and start it again with `txnadmin engine run "
                f"{engine_dir(s)}` (the engine recovers it from its log as a broker does on load); while it runs, its "
                f"server (URL and token in server.json there) also takes `pulsar-admin topics unload {topic}`")
    return f"unload {what} so it loads again: `pulsar-admin topics unload {topic}`"


def metrics_source(s: Survey) -> str:
    """What `txnadmin metrics` reads for this target: the broker's /metrics URL, or the engine itself."""
    return s.target if is_local(s) else f"{s.target}/metrics/"


def threshold_fix(s: Survey, settings: dict) -> str:
    """How to set batched-writer thresholds (``settings``: name → value), which Pulsar reads only at start."""
    lines = broker_conf_lines(settings)
    if is_local(s):
        sets = " ".join(f"--set {line}" for line in lines)
        return (f"stop the engine running there, then `txnadmin engine init {engine_dir(s)} --exist-ok {sets}` and "
                f"start it again with `txnadmin engine run {engine_dir(s)}` (its engine.conf is read at start; the "
                "thresholds are not dynamic, as in Pulsar)")
    return f"{THRESHOLDS_NOT_DYNAMIC}: " + ", ".join(lines)


def upgrade_advice(s: Survey, bug: dict) -> str:
    """The upgrade advice for ``bug`` that fits the target's brokers: none on the engine, the brokers still without
    the fix when their versions were read, and the releases to compare with otherwise. Empty when it does not apply."""
    if is_local(s):
        return ""
    pr = f"PR #{bug['fix'] or bug['ref']}"
    fixed = " / ".join(fixed_text(bug["fixed"]))
    if not s.versions or any(area.startswith("version of ") for area in s.errors):
        return f"if a broker runs a release older than {fixed} (or a line without {pr}), upgrade it"
    old = []
    for broker, text in sorted(s.versions.items()):
        v = release(text)
        if v is not None and is_fixed(v, bug["fixed"]):
            continue
        own = None if v is None else first_fixed(bug["fixed"], v)
        to = f"{'.'.join(map(str, own))} or later" if own else f"a line with it ({fixed} or later)"
        old.append(f"{broker} ({text}) to {to}")
    if not old:
        return (f"every broker runs a release with {pr} ({', '.join(sorted(set(s.versions.values())))}), so this is "
                f"not apache/pulsar#{bug['ref']}: read the owning broker's log for why it cannot finish")
    return f"upgrade {', '.join(old)} ({pr})"


def known_bug(number: int) -> dict:
    return next(bug for bug in KNOWN_BUGS if bug["ref"] == number)


def txn_times(meta: dict) -> tuple[Optional[int], Optional[int], list[str]]:
    """A transaction's ``openTimestamp`` and ``timeoutAt`` as the coordinator sent them, and which are missing.

    Both are required to judge an age: reading a missing open time as 0 ("opened in 1970") would make a live
    transaction look decades overdue, and ``--fix`` would abort it. So a missing, non-integer or non-positive open
    time, or a missing or negative timeout, is reported (unknown), never judged."""
    def number(name: str, low: int) -> Optional[int]:
        value = meta.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= low else None

    opened, timeout = number("openTimestamp", 1), number("timeoutAt", 0)
    missing = [name for name, value in (("openTimestamp", opened), ("timeoutAt", timeout)) if value is None]
    return opened, timeout, missing


def tc_disabled_unknown(name: str, s: Survey) -> list[Finding]:
    return [unknown(name, "cluster", f"transaction coordinators answer 503: {s.tc_disabled}",
                    "see the `coordinators` finding")]
