"""`status`: one poll of every recorded log, read-only on the target, and the report of what it proved."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from ...admin.cluster import ClusterView
from ...admin.endpoints import coordinator_ids
from ...admin.protocol import AdminError, NotFoundError, TransactionsAdmin
from ...names import is_pending_ack_store, transaction_log_local_name
from .checklist import accepted_count, baselines_of, flush_facts, remember_flush, require_state, save_state
from .evidence import (
    FLUSHED_HINT, RERECORD_HINT, SCAN_HINT, coordinator_status, iso_time, read_evidence, store_status, tc_not_loaded,
)
from .logs import LogReader
from .reopen import Poll, Session, counted_move, counters_cover, judge_reopened, revoke_accepted
from .report import DowngradeError, LogStatus, Report, Waiting
from .target import (
    Progress, active_brokers, admin_call, check_identity, describe_on, flags_on_brokers, target_identity, topic_listing,
)


def status(admin: TransactionsAdmin, state_path: Path, concurrency: int = 16, progress: Progress = None,
           target: Optional[str] = None, flag_wait_s: float = 0.0, session: Optional[Session] = None,
           save: bool = True, require_counters: bool = False, broker: Optional[str] = None) -> Report:
    """One poll, read-only on the target. ``save``: remember in the checklist what this poll proved (only the
    checklist's one writer, `wait`, saves: `downgrade status` run beside it reads). ``session``: `wait`'s watch and
    polls, which let a reopen be accepted when the watch proves it harmless; without one, a reopen is unproven.
    ``require_counters``: a safe verdict also needs every broker's flush counters read live, covering this poll
    (always, once a safe verdict was recorded, and for `guard`). ``broker``: one the operator named (`guard`
    --broker), refused (exit 3) as soon as the active brokers are read when it is not one of them."""
    view = session.view if session is not None else ClusterView(admin, target or "")
    if session is not None:
        view.forget()  # identity and brokers are read afresh at every poll
    # a target that cannot be read says so before a checklist is looked for: none could be about it
    ident = target_identity(admin, target, view) if target is not None else None
    state = require_state(state_path)
    if ident is None:
        ident = target_identity(admin, state["identity"]["adminUrl"], view)
    check_identity(state, ident, state_path)
    brokers = active_brokers(admin, ident, view)
    if broker is not None and broker not in brokers:  # a typo fails before the poll, not after it
        raise DowngradeError(f"broker {broker} is not among the target's active brokers ({', '.join(brokers)}): "
                             "name it as the cluster lists it (host:port)", 3)
    on = flags_on_brokers(view, brokers)
    if on:
        raise DowngradeError(
            f"batching was switched back on ({describe_on(on)}): stores that reopen now batch again; run "
            "`txnadmin downgrade start` again to disable it and re-record what reopened", 1)
    poll: Optional[Poll] = None
    if session is not None:
        poll = session.new_poll(state)
        if session.watch is not None:
            session.watch.read_round()  # a read of every broker right before this poll's reads of the logs
        poll.t_reads = time.monotonic()
    baselines = baselines_of(state)
    changed = False
    # Without a watch, the brokers are read here and again after the logs: the two reads show /metrics live.
    first_reads = view.read_brokers(brokers) if session is None or session.watch is None else None
    moved = counted_move(view, brokers, baselines, session, first_reads)
    if moved is not None:
        changed |= revoke_accepted(state, moved)
    coord = [(LogReader(admin, "coordinator", k, {}), rec) for k, rec in sorted(state["coordinators"].items(),
                                                                                key=lambda kv: int(kv[0]))]
    stores = [(LogReader(admin, "pending-ack", k, rec), rec) for k, rec in sorted(state["pendingAckStores"].items())]
    jobs = coord + stores
    # Logs that exist now but were never recorded may have opened while batching was on: they are part of the
    # proof too. One listing per namespace (also what tells "deleted" from "not loaded").
    listing = topic_listing(admin, concurrency)
    unrecorded = [LogStatus("pending-ack", name, None, None, False, "created since recording: it may have opened "
                            "while batching was on", RERECORD_HINT, kind=Waiting.UNRECORDED)
                  for name in sorted(listing) if is_pending_ack_store(name)
                  and name not in state["pendingAckStores"]]
    tc_ids = set(admin_call(lambda: coordinator_ids(admin.list_coordinators())))
    unrecorded += [LogStatus("coordinator", transaction_log_local_name(i), None, None, False, "created since "
                             "recording (coordinators scaled up)", RERECORD_HINT, extra={"coordinatorId": i},
                             kind=Waiting.UNRECORDED)
                   for i in sorted(tc_ids) if str(i) not in state["coordinators"]]

    def one(job) -> tuple[LogStatus, Optional[int]]:
        log, rec = job
        found = read_evidence(log, rec, listing, state_path, state, tc_ids)
        verdict, ids = found.verdict, found.ledgers
        if verdict is not None and verdict.kind == Waiting.NOT_LOADED and session is not None and poll is not None:
            return _load_its_topic(admin, session, poll, log, verdict), found.confirmed
        if verdict is not None:
            return verdict, found.confirmed
        assert ids is not None  # read_evidence gives the ledgers whenever it reaches no verdict
        if log.component == "coordinator":
            try:
                return coordinator_status(admin, log, rec, ids), found.confirmed
            except NotFoundError:  # it went away between two reads of this poll
                return tc_not_loaded(log.key, rec), None
        return store_status(log, rec, ids), found.confirmed

    results: list[tuple[LogStatus, Optional[int]]] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for answer in pool.map(one, jobs):
            results.append(answer)
            if progress:
                progress(len(results), len(jobs))
    if poll is not None:
        poll.t_end, poll.wall_end = time.monotonic(), time.time()
    logs: list[LogStatus] = []
    for job, (outcome, confirmed) in zip(jobs, results, strict=True):
        log, rec = job
        result = outcome
        key = (log.component, log.key)
        if result.kind == Waiting.REOPENED and not rec.get("unproven"):
            result, confirmed, decided = judge_reopened(session, poll, key, job, result, confirmed, one)
            changed |= decided
        elif session is not None and poll is not None and result.kind not in (
                Waiting.NOT_LOADED, Waiting.TC_NOT_LOADED, Waiting.SUBSCRIPTION_GONE) and not (
                result.done and "deleted" in result.reason):
            session.seen_unchanged[key] = poll.number  # read, and not reopened since recording
        if rec.get("acceptedReopens"):
            result.extra["acceptedReopens"] = rec["acceptedReopens"]
        logs.append(result)
        if confirmed is not None and confirmed != rec.get("confirmedLedger"):
            rec["confirmedLedger"] = confirmed
            changed = True
        if (result.component == "pending-ack" and result.done and result.oldest_ledger_id is not None
                and rec.get("provenDone") != rec.get("recoverStartTime")):
            # Done from its ledgers, with recoverStartTime confirmed unchanged in this poll (an unchanged newest
            # ledger, or the stats call): the next polls only need to see that it did not reopen.
            rec["provenDone"], rec["provenOldest"] = rec["recoverStartTime"], result.oldest_ledger_id
            changed = True
    logs += unrecorded
    loads = [l.extra["topicLoad"] for l in logs if "topicLoad" in l.extra]
    # The counters again, read after every log: the poll that says safe is covered too. Without a watch, one read
    # of the brokers serves both the counted move and the cover below.
    end = poll.t_end if poll is not None and poll.t_end is not None else time.monotonic()
    last_reads = view.read_brokers(brokers) if moved is None and first_reads is not None else None
    moved = counted_move(view, brokers, baselines, session, last_reads) if moved is None else moved
    # Safe is a statement about the moment of a verdict: once one was given, every later verdict re-judges the
    # counters, since a store that opened batching may write its first batched entry at any time after it.
    # (A stopped engine's read-only view runs no broker: nothing can write, and there are no counters to read.)
    frozen = bool(getattr(admin, "frozen", False))
    counters_needed = accepted_count(state) > 0 or (
        (require_counters or "safeVerdict" in state) and not frozen)
    if moved is not None:
        changed |= revoke_accepted(state, moved)
        changed |= remember_flush(state, moved, f"poll {poll.number}" if poll is not None else "status")
    facts = dict(flush_facts(state))
    if moved is not None and moved.broker not in facts:
        facts[moved.broker] = {"evidence": moved.describe()}  # `downgrade status` saves nothing: shown all the same
    for broker, fact in sorted(facts.items()):
        # A counted flush is a fact until every log that could have written it is re-recorded: a new baseline, a
        # restart that zeroes the counters, or `start` run again without that re-record never ends it.
        logs.append(LogStatus("broker", broker, None, None, False, fact["evidence"],
                              "find the store that still batches on that broker (a broker.conf override?); then "
                              + FLUSHED_HINT, kind=Waiting.STILL_FLUSHING, extra={"proof": fact["evidence"]}))
    if not facts and counters_needed and all(l.done for l in logs):
        # Accepted reopens rest on "no batched flush anywhere": the verdict needs counters that cover this poll.
        ok, why = counters_cover(view, brokers, baselines, session, end, first_reads, last_reads)
        if not ok:
            logs.append(LogStatus("broker", "*", None, None, False, f"cannot confirm yet that no batched writer "
                                  f"flushed: {why}", "wait: the next poll reads the counters again",
                                  kind=Waiting.COUNTERS, extra={"proof": why}))
    verification = state.get("verification")
    if verification is not None and verification.get("verdict") != "clean":
        logs.append(_scan_not_clean(verification, all(l.done for l in logs)))
    safe_now = bool(logs) and all(l.done for l in logs)
    if safe_now and save and "safeVerdict" not in state:
        state["safeVerdict"] = {"at": int(time.time() * 1000), "poll": poll.number if poll is not None else None}
        changed = True
    if changed and save:
        save_state(state_path, state)
    return Report(safe_now, not on, logs, verification,
                  target={"adminUrl": ident["adminUrl"], "clusterName": ident.get("clusterName")}, brokers=brokers,
                  reopens_accepted=accepted_count(state), poll=poll.number if poll is not None else None,
                  topic_loads=loads)


def _scan_not_clean(verification: dict, only_it: bool) -> LogStatus:
    """The recorded scan said batched (or incomplete): it stands until a new scan replaces it, whatever the logs do
    since. Said at once, with the command, rather than left on the summary line while `wait` waits in vain."""
    when = verification.get("verifiedAt")
    at = f" at {iso_time(when)}" if isinstance(when, int) else ""
    found = verification.get("liveBatchedEntries")
    what = (f"found {found} batched entr{'y' if found == 1 else 'ies'} in live ledgers" if found
            else f"was {verification.get('verdict')}")
    reason = f"the scan recorded by `txnadmin downgrade verify`{at} {what}"
    reason += (": every log is done since, but a recorded scan changes only when a new one replaces it" if only_it
               else ": it stands until a new scan replaces it")
    return LogStatus("verification", "recorded scan", None, None, False, reason, SCAN_HINT, kind=Waiting.SCAN,
                     extra={"verdict": verification.get("verdict")})


def _load_its_topic(admin: TransactionsAdmin, session: Session, poll: Poll, log: LogReader,
                    verdict: LogStatus) -> LogStatus:
    """A recorded store answering 404 while listed: its topic is not loaded (unloaded, or its bundle moved, and
    nobody looked it up since). `wait` does what the suggestion asks of the operator, a read of the topic's v2
    stats, which makes its owner load it (Pulsar's getTopicIfExists) and so reopens the store. The store stays
    not done at this poll; the reopen is judged at a later one by the watch, like any other (the polls that saw
    the 404 never count as seeing it unchanged, so they stay inside the bracket)."""
    topic = log.info["topic"]
    asked = session.loads.setdefault(poll.number, set())
    if log.key in asked:  # at most once per store per poll (a re-judged log comes back here)
        return verdict
    asked.add(log.key)
    tried = f"`wait` read {topic}'s stats (`pulsar-admin topics stats {topic}`) at poll {poll.number} to load it"
    load: dict[str, Any] = {"topic": topic, "store": log.key, "poll": poll.number}
    try:
        admin.topic_stats(topic)
    except AdminError as exc:
        why = " ".join(str(exc.reason).split())[:300]  # one line, whatever the target sent
        answer = f"HTTP {exc.status}: {why}" if exc.status else why
        load["result"] = f"failed: {answer}"
        verdict.reason = (f"store not loaded (listed, but its stats answer 404); {tried}, which failed ({answer}): "
                          "it keeps waiting and tries again at the next poll")
        verdict.suggestion = (f"see why {topic} does not load: `pulsar-admin topics stats {topic}` answers the same; "
                              "its owner's broker log says why")
    else:
        load["result"] = "loaded"
        verdict.reason = (f"store not loaded at this poll (listed, but its stats answered 404); {tried}: its reopen "
                          "is judged at the next poll (accepted only if the watch proves batching stayed off)")
        verdict.suggestion = "wait: the next poll reads the reopened store"
    verdict.extra["topicLoad"] = load
    return verdict
