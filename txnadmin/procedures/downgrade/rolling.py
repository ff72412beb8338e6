"""`roll`: the rolling downgrade after the safe verdict, one broker at a time, to its real end.

For each active broker, in order:

1. **The proof holds** (the guard): one poll of every recorded log, with the watch that has run since the walk
   began (so a store that reopened on another broker when an earlier one went down is judged as `wait` judges a
   reopen: accepted when the watch proves batching stayed off and no writer flushed; re-recorded otherwise), and
   the flush counters of every broker that still has a batched writer read live, none moved since the baselines.
2. **The broker goes down and comes back older**: on the engine the walk restarts it at the older version itself
   (``restart``); on a real cluster it says what to do and waits until the broker answers again with the asked
   version and a new process (a new ``process_start_time_seconds``, or at least another version: a running
   process cannot change its version).
3. **Every log recovered**: every recorded coordinator answers its stats as Ready, and every recorded pending-ack
   store (its topic loaded by a read of its stats, as a client's lookup would) reports Ready, within the recovery
   timeout. A log that holds a batched entry does not recover on a broker older than PIP-160: that failure stops
   the walk (exit 1), naming the broker, the log, and the way back (start that broker on its old version again).

Progress is kept in the checklist (``rollingDowngrade``), written atomically after each step, so a walk killed
at any moment resumes where it was: a broker recorded as restarting is waited for, not restarted again.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ...admin.cluster import ClusterView, parse_version
from ...admin.protocol import AdminError, NotFoundError, TransactionsAdmin
from ...names import encodes_pending_ack_subscription, pending_ack_topic, subscription_fits_store_name
from .checklist import ChecklistLock, baselines_of, load_state, require_state, save_state
from .reopen import Session
from .report import DowngradeError, Report
from .target import active_brokers, target_identity, topic_listing
from .waiting import wait_in_session
from .watch import WATCH_PERIOD_S

Restart = Callable[[str, str], None]  # (broker, version): restart it at that version and return once it answers
Say = Callable[[str], None]


@dataclass
class Unrecovered:
    """A recorded log that did not report Ready: ``what`` it is, ``why`` (what the target answered)."""

    component: str
    key: str
    why: str


@dataclass
class RollReport:
    """Where the walk ended: every broker's step, and the logs that did not recover (if any)."""

    to_version: str
    brokers: dict[str, dict] = field(default_factory=dict)
    unrecovered: list[Unrecovered] = field(default_factory=list)
    failed_broker: Optional[str] = None
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"toVersion": self.to_version, "done": self.done, "brokers": self.brokers,
                "failedBroker": self.failed_broker,
                "unrecovered": [{"component": u.component, "log": u.key, "why": u.why} for u in self.unrecovered]}


def check_version(text: str) -> str:
    try:
        parse_version(text)
    except ValueError:
        raise DowngradeError(f"--to {text!r}: not a Pulsar version such as 2.10.6", 2) from None
    return text.strip()


def renamed_stores(state: dict, to_version: str) -> list[tuple[str, Optional[str]]]:
    """The recorded pending-ack stores a broker of ``to_version`` names otherwise: (the recorded name, the name it
    opens instead, or None when it cannot open one at all). Pulsar's PR #25727 (5.0.0; 4.2.2 on the 4.2 line)
    URL-encodes the subscription in the store's name; a broker on the other side of it looks for another managed
    ledger, so it replays none of the recorded store's acks, and before it a subscription holding '/' has no valid
    store name."""
    encoded = encodes_pending_ack_subscription(to_version)
    found: list[tuple[str, Optional[str]]] = []
    for key, rec in sorted(state["pendingAckStores"].items()):
        topic, subscription = rec.get("topic"), rec.get("subscription")
        if not isinstance(topic, str) or not isinstance(subscription, str):
            continue
        if not subscription_fits_store_name(subscription, encoded):
            found.append((key, None))
        elif (name := pending_ack_topic(topic, subscription, encoded)) != key:
            found.append((key, name))
    return found


def renamed_on(state_path: Path, to_version: str) -> list[tuple[str, Optional[str]]]:
    """:func:`renamed_stores` of the checklist at ``state_path`` (none without one), for the walk's plan: what the
    walk will refuse for, shown before anything is asked."""
    state = load_state(state_path)
    return [] if state is None else renamed_stores(state, check_version(to_version))


def _refuse_renamed(renamed: list[tuple[str, Optional[str]]], to_version: str) -> None:
    key, name = renamed[0]
    first = f"{key} cannot open at all (a '/' in its subscription)" if name is None else f"{key} opens as {name}"
    more = f" (and {len(renamed) - 1} more)" if len(renamed) > 1 else ""
    raise DowngradeError(
        f"{len(renamed)} pending-ack store(s) are named otherwise by a {to_version} broker: {first}{more}. Such a "
        "broker replays none of their acks (Pulsar PR #25727 changed how the subscription is written in the name), "
        "so transactions acking on those subscriptions when their broker goes down lose their acks, and a store "
        "that cannot open refuses every transactional ack. Walk to a version that names them the same way if one "
        "will do (5.x, or 4.2.2 and later on 4.2), or end those transactions and pass --allow-renamed-stores; no "
        "broker was touched", 1)


def roll(admin: TransactionsAdmin, state_path: Path, to_version: str, restart: Optional[Restart], say: Say,
         target: Optional[str] = None, timeout_s: float = 600.0, interval_s: float = 5.0,
         recovery_timeout_s: float = 60.0, concurrency: int = 16, watch_period: float = WATCH_PERIOD_S,
         on_poll: Optional[Callable[[Report], None]] = None, allow_renamed: bool = False) -> RollReport:
    """Walk every active broker down to ``to_version`` (module docstring). DowngradeError 1 when the proof does not
    hold before a broker or a broker does not come back in time, or when a recorded store would be named otherwise
    on ``to_version`` (unless ``allow_renamed``: then a store that cannot open there is not asked to recover); 3
    when the target cannot be read. A failed recovery is returned (``failed_broker``, ``unrecovered``), not raised:
    the caller names the way back."""
    to_version = check_version(to_version)
    with ChecklistLock(state_path):
        state = require_state(state_path)
        if "safeVerdict" not in state:
            raise DowngradeError(f"{state_path}: no safe verdict recorded yet; run `txnadmin downgrade wait` until it "
                                 "says safe, then walk the brokers down", 1)
        renamed = renamed_stores(state, to_version)
        if renamed and not allow_renamed:
            _refuse_renamed(renamed, to_version)
        if renamed:
            say(f"{len(renamed)} pending-ack store(s) are named otherwise on {to_version} (--allow-renamed-stores): "
                "their acks are not replayed there" + ("; the ones that cannot open are not asked to recover"
                                                       if any(name is None for _, name in renamed) else ""))
        walk = state.get("rollingDowngrade")
        if walk is not None and walk.get("to") != to_version:
            raise DowngradeError(f"{state_path}: a rolling downgrade to {walk.get('to')} is in progress; finish it "
                                 f"with --to {walk.get('to')}", 2)
        admin_url = target if target is not None else state["identity"]["adminUrl"]
        session = Session(admin, admin_url, baselines_of(state), watch_period)
        try:
            unopenable = {key for key, name in renamed if name is None}
            return _walk(admin, state_path, to_version, restart, say, target, admin_url, timeout_s, interval_s,
                         recovery_timeout_s, concurrency, session, on_poll, unopenable)
        finally:
            session.close()


def _walk(admin, state_path, to_version, restart, say, target, admin_url, timeout_s, interval_s, recovery_timeout_s,
          concurrency, session: Session, on_poll, unopenable: set[str]) -> RollReport:
    view = ClusterView(admin, target or "")
    ident = target_identity(admin, admin_url, view)
    brokers = active_brokers(admin, ident, view)
    report = RollReport(to_version)
    state = require_state(state_path)
    walk = state.setdefault("rollingDowngrade", {"to": to_version, "brokers": {}})
    for broker in brokers:
        step = walk["brokers"].setdefault(broker, {})
        report.brokers[broker] = step
        if step.get("state") == "done":
            say(f"{broker}: already on {step.get('versionAfter')}, its logs recovered (recorded)")
            continue
        reading = view.read_broker(broker)
        # A walk killed between recording "restarting" and the restart finds the same old process: it starts over
        never_went = (step.get("state") == "restarting" and reading.version != to_version
                      and reading.version == step.get("versionBefore")
                      and reading.process_start == step.get("processStartBefore"))
        if step.get("state") != "restarting" or never_went:
            if reading.version == to_version:
                say(f"{broker}: already runs {to_version}; checking that its logs recovered")
                # not restarted by this walk: no earlier process to tell a new one from (one that exports no
                # process_start_time_seconds would otherwise never count as back)
                step.update(state="restarting", versionBefore=None, processStartBefore=None)
            else:
                _guard_before(admin, state_path, broker, target, timeout_s, interval_s, concurrency, session,
                              on_poll, say)
                step.update(state="restarting", versionBefore=reading.version,
                            processStartBefore=reading.process_start, at=int(time.time() * 1000))
                _save_walk(state_path, walk)
                if restart is not None:
                    say(f"{broker}: restarting it on {to_version}")
                    restart(broker, to_version)
                else:
                    say(f"{broker}: take it down now and start it on {to_version}; waiting until it answers again "
                        f"(at most {timeout_s:g} s)")
        _await_return(view, broker, step, to_version, timeout_s, interval_s, say)
        _save_walk(state_path, walk)
        failed = _unrecovered(admin, state_path, concurrency, recovery_timeout_s, interval_s, unopenable)
        if failed:
            step["state"] = "failed"
            step["unrecovered"] = [f"{u.component} {u.key}: {u.why}" for u in failed]
            _save_walk(state_path, walk)
            report.failed_broker, report.unrecovered = broker, failed
            return report
        step["state"] = "done"
        step.pop("unrecovered", None)
        _save_walk(state_path, walk)
        say(f"{broker}: back on {to_version}; every recorded log recovered")
    versions = {b: view.read_broker(b).version for b in active_brokers(admin, ident, view)}
    behind = {b: v for b, v in versions.items() if v != to_version}
    if behind:
        raise DowngradeError("not every active broker runs " + to_version + ": " + ", ".join(
            f"{b} runs {v or 'an unknown version'}" for b, v in sorted(behind.items()))
            + " (a broker joined during the walk?); run this again to walk it down too", 1)
    report.done = True
    walk["finishedAt"] = int(time.time() * 1000)
    _save_walk(state_path, walk)
    return report


def _save_walk(state_path: Path, walk: dict) -> None:
    """Re-read the checklist (the guard's polls save their own findings) and store the walk's progress in it."""
    state = require_state(state_path)
    state["rollingDowngrade"] = walk
    save_state(state_path, state)


def _guard_before(admin, state_path, broker, target, timeout_s, interval_s, concurrency, session, on_poll,
                  say) -> None:
    """The proof, taken again before ``broker`` goes down: polls with the walk's watch until safe (re-recording a
    reopen the watch cannot prove), within ``timeout_s``."""
    report = wait_in_session(admin, state_path, timeout_s, interval_s, on_poll, concurrency, None, target, True,
                             session, None)
    if not report.safe:
        reasons = "; ".join(f"{l.component} {l.name}: {l.reason}" for l in report.waiting[:3])
        more = f" (and {len(report.waiting) - 3} more)" if len(report.waiting) > 3 else ""
        raise DowngradeError(f"not safe to take {broker} down: {reasons}{more}; it stays up. Run `txnadmin "
                             "downgrade wait --rerecord` until safe, then this again", 1)
    say(f"{broker}: the proof holds (poll {report.poll}: every log proven, no batched flush since `start`)")


def _await_return(view: ClusterView, broker: str, step: dict, to_version: str, timeout_s: float,
                  interval_s: float, say: Say) -> None:
    """Until ``broker`` is active again on ``to_version`` as a new process; DowngradeError 1 at the timeout."""
    deadline = time.monotonic() + timeout_s
    last = "not listed among the active brokers"
    while True:
        view.forget()
        try:
            listed = broker in (view.active_brokers() or [])
        except AdminError as exc:
            listed, last = False, f"the active brokers could not be read ({exc.reason})"
        if listed:
            reading = view.read_broker(broker)
            new_process = (reading.process_start is not None and reading.process_start != step.get(
                "processStartBefore")) or (reading.version is not None and reading.version != step.get(
                    "versionBefore"))
            if reading.version == to_version and new_process:
                step.update(versionAfter=reading.version, processStartAfter=reading.process_start)
                return
            last = (f"it answers version {reading.version or '(unreadable)'}" if reading.version != to_version
                    else "it answers the asked version, but no new process start time shows yet")
        if time.monotonic() + interval_s > deadline:
            raise DowngradeError(f"{broker} did not come back on {to_version} within {timeout_s:g} s ({last}); "
                                 "start it on that version, then run this again: the walk resumes there", 1)
        time.sleep(min(interval_s, 1.0))


def _unrecovered(admin: TransactionsAdmin, state_path: Path, concurrency: int, timeout_s: float,
                 interval_s: float, unopenable: frozenset[str] | set[str] = frozenset()) -> list[Unrecovered]:
    """The recorded logs not Ready, after retrying them until ``timeout_s`` (a replay takes a while on a real
    broker). A store whose subscription was deleted since recording (gone from the listing) has nothing to
    recover, nor has one the operator accepted cannot open on the older version (``unopenable``)."""
    state = require_state(state_path)
    listing = topic_listing(admin, concurrency)
    pending: list[tuple[str, str, dict]] = [("coordinator", k, {}) for k in sorted(state["coordinators"], key=int)]
    pending += [("pending-ack", k, rec) for k, rec in sorted(state["pendingAckStores"].items())
                if k in listing and k not in unopenable]
    deadline = time.monotonic() + timeout_s
    while True:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            found = list(pool.map(lambda job: _recovered(admin, *job), pending))
        failed = [(job, why) for job, why in zip(pending, found, strict=True) if why is not None]
        if not failed or time.monotonic() + interval_s > deadline:
            return [Unrecovered(component, key, why) for (component, key, _), why in failed]
        pending = [job for job, _ in failed]
        time.sleep(min(interval_s, 1.0))


def _recovered(admin: TransactionsAdmin, component: str, key: str, rec: dict) -> Optional[str]:
    """None when the log reports Ready; otherwise what the target said."""
    try:
        if component == "coordinator":
            stats = admin.coordinator_stats(int(key))
        else:
            topic, subscription = rec["topic"], rec["subscription"]
            try:
                stats = admin.pending_ack_stats(topic, subscription)
            except NotFoundError:
                admin.topic_stats(topic)  # loads the topic on its owner, which opens the store
                stats = admin.pending_ack_stats(topic, subscription)
    except NotFoundError as exc:
        return f"not found ({exc.reason}): it has not recovered"
    except AdminError as exc:
        return f"HTTP {exc.status}: {' '.join(str(exc.reason).split())[:200]}"
    state = stats.get("state") if isinstance(stats, dict) else None
    return None if state == "Ready" else f"state {state!r}, not Ready"

