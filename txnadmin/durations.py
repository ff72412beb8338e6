"""One grammar for every duration an operator types, and one parser for it.

- ``500ms``, ``90s``, ``5m``, ``2h``, ``1d``, ``1w``, ``1y`` and parts that add up (``1h30m``, ``2m30s``); a part may
  have decimals (``1.5h``); units in any case (``5M`` is five minutes, as in Pulsar's RelativeTimeUtil).
- A bare number is taken only by a flag that always took one, in the unit its help names, and every error of that
  flag names that unit again: ``--older-than`` (seconds), ``--max-transaction-timeout`` (minutes). Those are kept for
  the scripts that pass them.
- Where a bare number would be misread, a unit is required: doctor's and the exporter's ``--threshold`` durations,
  whose bare number meant milliseconds while every other flag's means seconds or minutes. Reading it as seconds would
  silently change a script's meaning a thousandfold; refusing it says so at once.
- ``transactions slow-transactions -t`` keeps pulsar-admin's own grammar and words (RelativeTimeUtil: a bare number is
  seconds), as every `transactions` command keeps pulsar-admin's.
"""

from __future__ import annotations

import re
from typing import Optional

UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000,
           "y": 365 * 86_400_000}
UNIT_NAMES = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
MAX_MS = 100 * 365 * 86_400_000  # a century: anything longer is a typo, not an age or a timeout
_NUMBER = r"\d{1,15}(?:\.\d{1,9})?"  # no huge digit strings: int() of those is slow and the value absurd anyway
_PART = re.compile(rf"({_NUMBER})(ms|[smhdwy])", re.IGNORECASE)
EXAMPLES = "e.g. 90s, 5m, 2h or 1h30m (units ms, s, m, h, d, w, y)"


def bare_rule(bare: Optional[str]) -> str:
    """How a flag takes a number without a unit, in words for its help and its errors."""
    return f"a bare number is {UNIT_NAMES[bare]}" if bare else "a number needs its unit"


def parse_duration_ms(text: str, flag: str, bare: Optional[str] = None) -> int:
    """``text`` as milliseconds. ``bare``: the unit of a number given without one (``"s"``, ``"m"``, ``"ms"``), or
    None where a unit is required. ValueError naming the flag, the input and the rule for anything else (empty,
    negative, unknown units, a bare number where a unit is required, longer than a century)."""
    spec = text.strip()
    problem = f"invalid duration '{text}' for {flag}: give {EXAMPLES}; {bare_rule(bare)}"
    if re.fullmatch(_NUMBER, spec):
        if bare is None:
            raise ValueError(problem + " here")
        spec += bare
    total, pos = 0.0, 0
    while pos < len(spec):
        m = _PART.match(spec, pos)
        if not m:
            raise ValueError(problem)
        total += float(m.group(1)) * UNIT_MS[m.group(2).lower()]
        pos = m.end()
    if not spec:
        raise ValueError(problem)
    if total > MAX_MS:
        raise ValueError(f"invalid duration '{text}' for {flag}: longer than 100 years")
    return round(total)
