#!/usr/bin/env bash
# Scripted PIP-160 downgrade checklist. Usage: downgrade-checklist.sh TARGET [STATE] [TIMEOUT_SECONDS]
#   TARGET: http(s)://broker:8080 or local:/path/to/engine (credentials: --conf or PULSAR_CLIENT_CONF)
# Exit 0 only when it is safe to downgrade the brokers; 1 when still waiting at the timeout; 3 when the target
# cannot be read. Re-run it at any time: every step resumes where it was.
set -uo pipefail
TXNADMIN=${TXNADMIN:-txnadmin}
target=${1:?usage: downgrade-checklist.sh TARGET [STATE] [TIMEOUT_SECONDS]}
state=${2:-txnadmin-downgrade.json}
timeout=${3:-3600}

echo "1/3 disable batching, reload stores, record LastBatched ledgers"
# --yes: this script is the operator's confirmation (without a terminal, `start` refuses to act unasked).
"$TXNADMIN" -u "$target" downgrade start --yes --state "$state" -o json || exit $?

echo "2/3 wait until no live ledger may hold a batched entry (up to ${timeout}s)"
# The cluster moves while we wait (bundle moves, failovers, restarts): reopens the watch proves harmless are accepted;
# --rerecord --yes reloads and re-records the ones it cannot prove (a restart's), so the wait goes on unattended.
"$TXNADMIN" -u "$target" downgrade wait --state "$state" --timeout "$timeout" --interval 2 --rerecord --yes \
  -o json > "$state.status.json"
code=$?
# Exit 3 (target unreadable) leaves no report to summarise; the error is already on stderr.
[ -s "$state.status.json" ] && python3 - "$state.status.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for c in report["components"]:
    if not c["done"]:
        print(f"  waiting: {c['component']} {c['name']}: {c['reason']}" + (f" -> {c['suggestion']}" if c.get("suggestion") else ""))
print(f"  {report['logs'] - report['waiting']} of {report['logs']} logs done")
PY
if [ "$code" -ne 0 ]; then echo "3/3 not safe yet (exit $code)"; exit "$code"; fi

echo "3/3 safe: downgrade the brokers one at a time (keep the batching flags off); before each one:"
echo "  $TXNADMIN -u $target downgrade guard --state $state --broker BROKER   # exit 0: take it down now"
echo "  or let txnadmin walk them (the proof again before each, each log checked recovered after):"
echo "  $TXNADMIN -u $target downgrade roll --state $state --to OLDER_VERSION"
