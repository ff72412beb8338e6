"""`versions`: every active broker's version against known transaction bugs; Pulsar 5's scalable-topic
transactions, which no admin API shows."""

from __future__ import annotations

from ..knowledge import KNOWN_BUGS, first_fixed, fixed_text, is_fixed, ref, release
from ..report import Finding, unknown
from ..survey import Survey
from .common import is_local

NAME = "versions"
SUMMARY = "every broker's version against known transaction bugs; Pulsar 5 scalable-topic transactions"
ASK_EACH = ("doctor asks every active broker its version at its own address (GET /admin/v2/brokers/version): let "
            "it reach each broker's web port, or ask that broker yourself and compare with docs/doctor.md")


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    if s.versions is None:
        return [unknown(name, "brokers", s.errors.get("versions", "not read"), "GET /admin/v2/brokers/version")]
    out: list[Finding] = []
    listing = [f"{area}: {reason}" for area, reason in sorted(s.errors.items())
               if area == "clusters" or area.startswith("brokers of ")]
    if listing:  # which brokers are active is unknown, so no version read proves the cluster current
        out.append(unknown(name, "brokers", "; ".join(listing), "grant doctor's role GET /admin/v2/clusters and "
                           "/admin/v2/brokers/{cluster}, then run again"))
    elif not s.versions and "versions" in s.errors:
        out.append(unknown(name, "brokers", s.errors["versions"], "GET /admin/v2/brokers/version"))
    for area, reason in sorted(s.errors.items()):
        if area.startswith("version of "):
            out.append(unknown(name, area.removeprefix("version of "), reason, ASK_EACH))
    for broker, text in sorted(s.versions.items()):
        version = release(text)
        if version is None:
            out.append(unknown(name, broker, f"version {text!r} is not x.y.z", "compare by hand with docs/doctor.md"))
            continue
        for bug in KNOWN_BUGS:
            if is_fixed(version, bug["fixed"]):
                continue
            out.append(Finding(
                name, "warning", broker, {"version": text, "fixedIn": fixed_text(bug["fixed"]), "ref": bug["ref"],
                                          "source": bug["source"]},
                f"{text} does not have the fix for: {bug['what']}",
                (f"the engine claims {text} (engineBrokerVersion in its engine.conf) and reproduces that release; "
                 "for a cluster on it: " if is_local(s) else "") + upgrade_line(version, bug),
                [ref(bug["ref"])] + ([ref(bug["fix"])] if bug["fix"] else [])))
        if version >= (5, 0, 0) and not is_local(s):  # the engine runs no scalable topics: nothing unseen there
            out.append(unknown(
                name, broker, f"{text}: Pulsar 5 runs a second coordinator for scalable (segment://) topics "
                "(PIP-473) whose transactions live in the metadata store; no admin API shows them, so doctor did not "
                "check them", "inspect /txn/id and /txn/op in the metadata store by hand"))
    return out


def upgrade_line(version: tuple[int, int, int], bug: dict) -> str:
    """The upgrade that fits this broker: the first release of its own line with the fix, or the lines that have it."""
    pr = f"PR #{bug['fix'] or bug['ref']}"
    own = first_fixed(bug["fixed"], version)
    if own is not None:
        return f"upgrade to {'.'.join(map(str, own))} or later (the first {version[0]}.{version[1]}.x with {pr})"
    return (f"upgrade to a line with {pr}: {' / '.join(fixed_text(bug['fixed']))} or later; doctor knows no "
            f"{version[0]}.{version[1]}.x release with it (check that line's release notes for a backport)")
