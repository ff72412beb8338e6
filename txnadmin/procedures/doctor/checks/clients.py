"""`client-versions`: producers on the topics transactions touch whose Java client batches transactional and plain
messages together (apache/pulsar#26547), from topic stats' ``publishers[].clientVersion``."""

from __future__ import annotations

from ..knowledge import CLIENT_BATCH_BUG, JAVA_CLIENT, fixed_text, is_fixed, ref, release
from ..report import Finding, unknown
from ..survey import Survey

NAME = "client-versions"
SUMMARY = "Java producers on transactional topics older than the fix for mixed transactional batches (PR #26547)"
FIXED = " / ".join(fixed_text(CLIENT_BATCH_BUG["fixed"]))


def check(s: Survey, t: dict) -> list[Finding]:
    if s.coordinators is None and s.tc_disabled is None:
        return [unknown(NAME, "producers", f"coordinators: {s.errors.get('coordinators', 'not read')}",
                        "see the coordinators finding: which topics transactions touch is not known")]
    out: list[Finding] = []
    if "producers" in s.errors:
        return [unknown(NAME, "producers", s.errors["producers"], "compare the target's admin API with Pulsar's")]
    if not s.txn_topics:
        return [Finding(NAME, "info", "producers", {"topics": 0},
                        "no topic was touched by an ongoing transaction when doctor read the coordinators, so no "
                        "producer was checked (this proves nothing about producers that come and go)",
                        "run doctor while the transactional applications run", [ref(CLIENT_BATCH_BUG["ref"])])]
    checked = others = 0
    for topic in s.txn_topics:
        stats = s.topic_stats.get(topic)
        if stats is None:
            reason = s.errors.get(f"stats of {topic}", "not read")
            out.append(unknown(NAME, topic, f"topic stats: {reason}", "grant doctor's role read access to the "
                               "topic's stats (GET /admin/v2/persistent/…/stats), then run again"))
            continue
        old, unreadable = [], []
        for pub in stats.get("publishers") or []:
            version = pub.get("clientVersion") if isinstance(pub, dict) else None
            who = {"producerName": pub.get("producerName") if isinstance(pub, dict) else None,
                   "clientVersion": version, "address": pub.get("address") if isinstance(pub, dict) else None}
            m = JAVA_CLIENT.match(version) if isinstance(version, str) else None
            if not isinstance(version, str) or not version:
                unreadable.append(who)
            elif m is None:
                others += 1  # another client (C++, Go, Python…): not the Java batch container this bug is in
            elif (v := release(m.group(1))) is not None and not is_fixed(v, CLIENT_BATCH_BUG["fixed"]):
                old.append(who)
            else:
                checked += 1
        if old:
            out.append(Finding(
                NAME, "warning", topic,
                {"producers": old[:20], "count": len(old), "fixedIn": fixed_text(CLIENT_BATCH_BUG["fixed"]),
                 "source": CLIENT_BATCH_BUG["source"]},
                f"{len(old)} producer(s) here run a Java client older than {FIXED}; that client can put a plain "
                "message into a batch holding a transaction's messages (or make a plain batch take a later "
                "message's transaction), and a batch carries one transaction: messages silently gain or lose "
                "their transaction, and commit or abort with the wrong one",
                f"upgrade those applications' Java client to {FIXED} or later (PR #26547); until then, do not send "
                "transactional and plain messages on one producer with batching on",
                [ref(CLIENT_BATCH_BUG["ref"])]))
        if unreadable:
            out.append(unknown(NAME, topic, f"{len(unreadable)} producer(s) report no clientVersion: "
                               f"{', '.join(str(p['producerName']) for p in unreadable[:5])}",
                               "find those applications and check their Pulsar client version by hand"))
    if checked or others:
        out.append(Finding(NAME, "info", "producers", {"javaAtOrPastTheFix": checked, "otherClients": others,
                                                       "topics": len(s.txn_topics)},
                           f"on the {len(s.txn_topics)} topic(s) ongoing transactions touch: {checked} Java "
                           f"producer(s) at {FIXED} or later, {others} producer(s) of other clients (this check "
                           "judges the Java client only)", "nothing to do", [ref(CLIENT_BATCH_BUG["ref"])]))
    return out
