"""pulsar-admin's output, exactly: Jackson's default pretty printer and Lombok's toString map lines."""

from __future__ import annotations

from txnadmin.admin.jackson import lombok, map_lines, pretty


def test_pretty_printer_matches_jackson_byte_for_byte():
    value = {"entriesAddedCounter": 0, "ledgers": [{"ledgerId": 13, "entries": 0, "offloaded": False},
                                                   {"ledgerId": 14, "entries": 2, "offloaded": False}],
             "cursors": {}, "list": [], "names": ["a", "b"], "nested": {"x": {"y": None, "z": "é"}}, "gone": None}
    assert pretty(value) == (
        '{\n'
        '  "entriesAddedCounter" : 0,\n'
        '  "ledgers" : [ {\n'
        '    "ledgerId" : 13,\n'
        '    "entries" : 0,\n'
        '    "offloaded" : false\n'
        '  }, {\n'
        '    "ledgerId" : 14,\n'
        '    "entries" : 2,\n'
        '    "offloaded" : false\n'
        '  } ],\n'
        '  "cursors" : { },\n'
        '  "list" : [ ],\n'
        '  "names" : [ "a", "b" ],\n'
        '  "nested" : {\n'
        '    "x" : {\n'
        '      "z" : "é"\n'
        '    }\n'
        '  }\n'
        '}'
    )
    assert pretty({}) == "{ }" and pretty([]) == "[ ]" and pretty({"only": None}) == "{ }"


def test_lombok_map_lines():
    stats = {"state": "Ready", "leastSigBits": 3, "lowWaterMark": 0, "ongoingTxnSize": 1, "recoverStartTime": 10,
             "recoverEndTime": 11}
    assert map_lines({"0": stats}, "TransactionCoordinatorStats") == (
        "0    TransactionCoordinatorStats(state=Ready, leastSigBits=3, lowWaterMark=0, ongoingTxnSize=1, "
        "recoverStartTime=10, recoverEndTime=11)")
    meta = {"txnId": "(0,3)", "status": "OPEN", "openTimestamp": 5, "timeoutAt": 1000,
            "producedPartitions": {"persistent://t/n/a": {"startPosition": "1:0", "aborted": False}},
            "ackedPartitions": {"persistent://t/n/a": {"s": {}}}}
    assert lombok("TransactionMetadata", meta) == (
        "TransactionMetadata(txnId=(0,3), status=OPEN, openTimestamp=5, timeoutAt=1000, "
        "producedPartitions={persistent://t/n/a=TransactionInBufferStats(startPosition=1:0, aborted=false)}, "
        "ackedPartitions={persistent://t/n/a={s=TransactionInPendingAckStats(cumulativeAckPosition=null)}}, "
        "owner=null)")
