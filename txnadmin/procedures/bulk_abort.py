"""Select open transactions by state, owner, age, coordinator, topic and id; then abort every one selected.

`transactions list` filters with :class:`TxnFilter` and :func:`select`; `transactions abort` shows the same
selection as its plan and calls :func:`abort_selected`, the one abort procedure (`find-hanging --abort` and `doctor
--fix` abort through it too), which gives every planned transaction an outcome:

- ``ABORTED``: our abort succeeded;
- ``ENDED``: it ended by itself between the plan and the abort (committed, aborted by its client or its timeout,
  or gone from its coordinator) — not an error;
- ``FAILED``: it is still held by its coordinator and not ended (or we could not tell): ``reason`` says why;
- ``UNKNOWN``: the target stopped answering while our abort was in flight: it may or may not have been aborted;
- ``NOT_ATTEMPTED``: the run stopped before it (the target stopped answering).
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..admin.hanging import open_transactions, open_transactions_by_coordinator
from ..admin.protocol import AdminError, NotFoundError, TargetUnreachableError, TransactionsAdmin, TxnId
from ..durations import parse_duration_ms
from ..names import normalize_topic

# Pulsar's TxnStatus values (the TransactionMetadata `status` field).
STATES = ("OPEN", "COMMITTING", "COMMITTED", "ABORTING", "ABORTED")
ENDING = ("COMMITTING", "ABORTING")
TERMINAL = ("COMMITTED", "ABORTED")

OLDER_THAN_BARE = "s"  # --older-than's bare number: seconds, as it always was (txnadmin/durations.py)


def parse_older_than(text: str) -> int:
    """--older-than as milliseconds: the one duration grammar (txnadmin/durations.py), a bare number in seconds."""
    return parse_duration_ms(text, "--older-than", OLDER_THAN_BARE)


_PATTERN_CHARS = set("0123456789(),*?[]!-")


def id_matcher(pattern: str) -> Callable[[str], bool]:
    """A glob (``*``, ``?``, ``[...]``) over the id as pulsar-admin prints it, ``(1,6)``.

    A pattern without parentheses gets them: ``1,*`` means ``(1,*)``. Raises ValueError for a pattern that holds
    anything an id cannot (ids are digits, a comma and parentheses), so a typo never silently matches nothing."""
    spec = pattern.strip()
    if not spec:
        raise ValueError("invalid --id-pattern '': give a glob over ids such as '(1,*)' or '1,4?'")
    stray = sorted(set(spec) - _PATTERN_CHARS)
    if stray:
        raise ValueError(f"invalid --id-pattern '{pattern}': {''.join(stray)!r} cannot appear in a transaction id "
                         "(ids print as (most,least), e.g. (1,6); use *, ? and [...] as in a shell)")
    if "(" not in spec and ")" not in spec:
        spec = f"({spec})"
    malformed = _malformed(spec)
    if malformed:
        raise ValueError(f"invalid --id-pattern '{pattern}': {malformed} (ids print as (most,least), e.g. (1,6); "
                         "use *, ? and [...] as in a shell)")
    compiled = re.compile(fnmatch.translate(spec))
    return lambda txn_id: compiled.match(txn_id) is not None


def _malformed(spec: str) -> str:
    """What keeps ``spec`` (parentheses added) from being the shape of an id, ``(most,least)``; "" when nothing does.

    A glob fnmatch would take but that is not shaped as an id would match nothing, or something else than meant."""
    rest, inside = [], False
    for i, ch in enumerate(spec):  # the text outside [...] sets, where the id's own punctuation must be
        if inside:
            inside = ch != "]" or spec[i - 1] == "[" or spec[i - 2:i] == "[!"
            if ch in "(),":
                return ("a [ without its closing ]" if "]" not in spec[i:] else
                        f"{ch!r} inside [...], where only digits belong")
        elif ch == "[":
            inside = True
        else:
            rest.append(ch)
    if inside:
        return "a [ without its closing ]"
    outside = "".join(rest)
    if outside.count("(") != 1 or outside.count(")") != 1 or not (outside[0] == "(" and outside[-1] == ")"):
        return "parentheses must enclose the whole id, once: (most,least)"
    if outside.count(",") > 1 or (outside.count(",") == 0 and "*" not in outside):
        return "an id has one comma, between its two numbers"
    if "]" in outside or "!" in outside:
        return "a ] or ! outside a [...] set"
    return ""


def touches_topic(row: dict, topic: str) -> bool:
    """Produced to or acked on ``topic`` (a full name), or any partition of it."""
    names = list(row.get("producedPartitions", [])) + [a.rsplit("/", 1)[0] for a in row.get("ackedPartitions", [])]
    return any(n == topic or n.startswith(topic + "-partition-") for n in names)


@dataclass(frozen=True)
class TxnFilter:
    """What `list` and `abort` select; empty fields select everything. Build it with :meth:`from_options`."""

    states: tuple[str, ...] = ()
    owner: Optional[str] = None
    older_than_ms: Optional[int] = None
    coordinator_id: Optional[int] = None
    topic: Optional[str] = None
    id_pattern: Optional[str] = None
    _id_match: Optional[Callable[[str], bool]] = field(default=None, compare=False, repr=False)

    @classmethod
    def from_options(cls, states: Optional[list[str]] = None, owner: Optional[str] = None,
                     older_than: Optional[str] = None, coordinator_id: Optional[int] = None,
                     topic: Optional[str] = None, id_pattern: Optional[str] = None) -> "TxnFilter":
        """The filter of the command-line options; ValueError naming the bad one."""
        wanted = []
        for state in states or []:
            name = state.strip().upper()
            if name not in STATES:
                raise ValueError(f"invalid --state '{state}': one of {', '.join(STATES)}")
            if name not in wanted:
                wanted.append(name)
        if coordinator_id is not None and coordinator_id < 0:
            raise ValueError(f"invalid --coordinator-id {coordinator_id}: coordinator ids start at 0")
        return cls(tuple(wanted), owner, parse_older_than(older_than) if older_than is not None else None,
                   coordinator_id, normalize_topic(topic) if topic is not None else None, id_pattern,
                   id_matcher(id_pattern) if id_pattern is not None else None)

    def is_empty(self) -> bool:
        return not (self.states or self.owner is not None or self.older_than_ms is not None
                    or self.coordinator_id is not None or self.topic or self.id_pattern is not None)

    def matches(self, row: dict) -> bool:
        """``row`` as :func:`open_transactions` gives it (its ``ageMs`` measured on the clock :func:`select` chose)."""
        return ((not self.states or row.get("status") in self.states)
                and (self.owner is None or row.get("owner") == self.owner)
                and (self.older_than_ms is None or row["ageMs"] > self.older_than_ms)
                and (self.coordinator_id is None or row["coordinatorId"] == self.coordinator_id)
                and (self.topic is None or touches_topic(row, self.topic))
                and (self._id_match is None or self._id_match(row["txnId"])))

    def to_json(self) -> dict:
        out: dict = {}
        if self.states:
            out["states"] = list(self.states)
        for key, value in (("owner", self.owner), ("olderThanMs", self.older_than_ms),
                           ("coordinatorId", self.coordinator_id), ("topic", self.topic),
                           ("idPattern", self.id_pattern)):
            if value is not None:
                out[key] = value
        return out

    def describe(self) -> str:
        """The filter in words, for plans and titles."""
        parts = []
        if self.states:
            parts.append("state " + "/".join(self.states))
        if self.owner is not None:
            parts.append(f"owner {self.owner!r}")
        if self.older_than_ms is not None:
            parts.append(f"open longer than {self.older_than_ms // 1000}s")
        if self.coordinator_id is not None:
            parts.append(f"coordinator {self.coordinator_id}")
        if self.topic is not None:
            parts.append(f"touching {self.topic}")
        if self.id_pattern is not None:
            parts.append(f"id like {self.id_pattern}")
        return ", ".join(parts) or "every open transaction"


@dataclass
class Selection:
    """What :func:`select` found: matching rows oldest first, coordinators that could not be listed, and the clock
    their ages were measured on (``"target"``: the broker's; ``"local"``: this machine's)."""

    rows: list[dict]
    unreadable: dict[int, str]
    now_ms: int
    clock: str


class NoTargetClockError(Exception):
    """The target gives no clock (no ``Date`` header) and an age decides what is selected."""


def select(admin: TransactionsAdmin, flt: TxnFilter, clock: str = "auto") -> Selection:
    """The open transactions ``flt`` matches, oldest first.

    ``clock`` says what ages are measured on: ``"local"`` this machine's; ``"target"`` the target's, raising
    :class:`NoTargetClockError` when it gives none; ``"auto"`` the target's when an age decides the selection
    (``--older-than``: a machine whose clock runs ahead would otherwise select transactions younger than asked),
    else the target's if it gives one and ours if not."""
    now: Optional[int] = None
    if clock == "target" or (clock == "auto" and flt.older_than_ms is not None):
        now = admin.broker_time_ms()
        if now is None:
            raise NoTargetClockError("the target sent no clock (no Date header), so transaction ages cannot be "
                                     "measured on it")
    elif clock == "auto":
        try:
            now = admin.broker_time_ms()
        except TargetUnreachableError:
            raise
        except AdminError:
            now = None  # ages only inform here: this machine's clock will do, and the plan says it is ours
    used = "target" if now is not None else "local"
    if now is None:
        now = int(time.time() * 1000)
    rows, unreadable = open_transactions_by_coordinator(admin, flt.coordinator_id, now)
    return Selection([row for row in rows if flt.matches(row)], unreadable, now, used)


def time_left_ms(row: dict, now_ms: int) -> Optional[int]:
    """What remains of its timeout (negative: past it); None when the coordinator gave no timeout.

    Pulsar's TransactionMetadata.timeoutAt is the timeout's length in ms, counted from openTimestamp."""
    timeout, opened = row.get("timeoutMs"), row.get("openTimestamp")
    return None if timeout is None or opened is None else opened + timeout - now_ms


def _still_held(admin: TransactionsAdmin, txn: TxnId) -> Optional[str]:
    """Its status as the coordinator holds it now; None when its coordinator lists it no more (it ended).

    The transaction-metadata call answers 404 both for an ended transaction and for a coordinator that is not
    loaded, so a 404 is only believed once the coordinator's own listing (which then answers) lacks it."""
    try:
        return admin.transaction_metadata(txn).get("status") or "unknown"
    except NotFoundError:
        listed = open_transactions(admin, txn.most_bits)
        for row in listed:
            if row["txnId"] == str(txn):
                return row["status"] or "unknown"
        return None


def _settled(admin: TransactionsAdmin, txn: TxnId, attempts: int = 25, pause_s: float = 0.2) -> Optional[str]:
    """:func:`_still_held`, asked again for a while while it is committing or aborting (an end in progress
    usually completes within milliseconds; one that does not is reported as it is)."""
    status = _still_held(admin, txn)
    for _ in range(attempts):
        if status not in ENDING:
            break
        time.sleep(pause_s)
        status = _still_held(admin, txn)
    return status


def _outcome(row: dict, outcome: str, status: Optional[str], reason: Optional[str] = None) -> dict:
    out = {"txnId": row["txnId"], "coordinatorId": row["coordinatorId"], "owner": row.get("owner"),
           "ageMs": row.get("ageMs"), "plannedStatus": row.get("status"), "outcome": outcome, "status": status}
    if reason:
        out["reason"] = reason
    return out


def abort_one(admin: TransactionsAdmin, row: dict) -> dict:
    """Abort one planned transaction and say what became of it (see the module docstring for the outcomes).

    Raises TargetUnreachableError when the target cannot be reached (the caller stops there)."""
    try:
        txn = TxnId.parse(row["txnId"])
    except ValueError:  # a listing's odd key (admin/hanging.py): nothing names it to abort
        return _outcome(row, "FAILED", row.get("status"), row.get("note") or "its key is not a transaction id")
    try:
        admin.abort_transaction(txn)
        return _outcome(row, "ABORTED", "ABORTED")
    except TargetUnreachableError:
        raise
    except AdminError as exc:
        failure = exc.reason
    try:
        status = _settled(admin, txn)
    except TargetUnreachableError:
        raise
    except AdminError as exc:
        return _outcome(row, "FAILED", None, f"{failure}; and its state could not be read again: {exc.reason}")
    if status is None:
        return _outcome(row, "ENDED", None, "it ended by itself after the plan (its coordinator holds it no more)")
    if status in TERMINAL:
        return _outcome(row, "ENDED", status, f"it ended by itself after the plan ({status})")
    if status == "COMMITTING":
        failure += " (Pulsar does not abort a committing transaction)"
    return _outcome(row, "FAILED", status, f"{failure}; it is still {status}")


def abort_selected(admin: TransactionsAdmin, rows: list[dict],
                   on_outcome: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """Abort every planned row in order; one outcome per row, each passed to ``on_outcome`` as soon as it is known.

    A failure of one abort never stops the others; a target that stops answering does: the one in flight is
    ``UNKNOWN`` (or ``FAILED`` when the request surely never left), the rest ``NOT_ATTEMPTED``."""
    results: list[dict] = []

    def record(result: dict) -> None:
        results.append(result)
        if on_outcome:
            on_outcome(result)

    for index, row in enumerate(rows):
        try:
            record(abort_one(admin, row))
        except TargetUnreachableError as exc:
            if exc.before_send:
                record(_outcome(row, "FAILED", row.get("status"), f"not sent: {exc.reason}"))
            else:
                record(_outcome(row, "UNKNOWN", None, f"the target stopped answering during its abort, so it may "
                                                      f"or may not be aborted: {exc.reason}"))
            for rest in rows[index + 1:]:
                record(_outcome(rest, "NOT_ATTEMPTED", rest.get("status"), "not attempted: the target stopped "
                                                                           "answering"))
            break
    return results


def summary(results: list[dict]) -> dict[str, int]:
    """Counts per outcome, every outcome named (0 when none)."""
    counts = {name: 0 for name in ("ABORTED", "ENDED", "FAILED", "UNKNOWN", "NOT_ATTEMPTED")}
    for r in results:
        counts[r["outcome"]] += 1
    return counts


def all_done(results: list[dict]) -> bool:
    """True when every planned transaction is proven ended: aborted by us or ended by itself."""
    return all(r["outcome"] in ("ABORTED", "ENDED") for r in results)


def require_topic_known(admin: TransactionsAdmin, topic: str) -> None:
    """Pulsar's 404 "Topic not found" for a topic (or partitioned topic) the target does not have: what pulsar-admin
    answers, where a filter alone would say "0 open transactions". The listing comes through the cluster view."""
    from ..admin.cluster import ClusterView
    from ..names import namespace_of

    try:
        topics = ClusterView(admin).topics(namespace_of(topic)) or []
    except NotFoundError:  # no such namespace (or tenant): no such topic either
        topics = []
    if topic not in topics and not any(t.startswith(topic + "-partition-") for t in topics):
        raise NotFoundError(f"Topic not found {topic}")
