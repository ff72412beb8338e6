"""docs/observability.md's alert section agrees with examples/prometheus/txnadmin-alerts.yml: the same alert names
both ways (docs/metrics.md names none the rules lack), and under each alert's heading its exact expression, `for:`
and severity. Links into doctor.md and within the page land on a heading."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "examples" / "prometheus" / "txnadmin-alerts.yml"
DOCS = ROOT / "docs"
OBSERVABILITY = DOCS / "observability.md"
# How the rules name alerts: a group prefix, then CamelCase words
ALERT_NAME = re.compile(r"\b(?:Txnadmin|Pulsar)[A-Z][A-Za-z0-9]*\b")


def _rules() -> dict[str, dict]:
    return {rule["alert"]: rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
            if "alert" in rule}


def _squash(text: str) -> str:
    return " ".join(text.split())


def _sections(doc: str) -> dict[str, str]:
    """Text under each `#### `Name`` heading, up to the next heading of any level."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^#### `([^`]+)`\n(.*?)(?=^#{1,4} |\Z)", doc, re.M | re.S):
        found[match.group(1)] = match.group(2)
    return found


def alert_doc_problems(rules: dict[str, dict], doc: str) -> list[str]:
    problems = []
    named = set(ALERT_NAME.findall(doc))
    problems += [f"not in the docs: {name}" for name in sorted(set(rules) - named)]
    problems += [f"named in the docs, not in the rules: {name}" for name in sorted(named - set(rules))]
    sections = _sections(doc)
    for name, rule in sorted(rules.items()):
        section = sections.get(name)
        if section is None:
            problems.append(f"{name}: no '#### `{name}`' section")
            continue
        blocks = re.findall(r"```promql\n(.*?)```", section, re.S)
        if [_squash(b) for b in blocks] != [_squash(rule["expr"])]:
            problems.append(f"{name}: the expression shown is not the rule's")
        wants_for = f"`for: {rule['for']}`" if "for" in rule else "no `for:`"
        if wants_for not in section:
            problems.append(f"{name}: {wants_for} not stated")
        if f"severity `{rule['labels']['severity']}`" not in section:
            problems.append(f"{name}: severity `{rule['labels']['severity']}` not stated")
        if not all(f"**{part}:**" in section for part in ("What it means", "Explain", "When it fires")):
            problems.append(f"{name}: meaning, explanation or fix missing")
    return problems


def test_every_alert_is_documented_exactly():
    rules = _rules()
    assert len(rules) == 16
    assert alert_doc_problems(rules, OBSERVABILITY.read_text()) == []


def test_the_check_catches_drift():
    """Each kind of disagreement is reported: a renamed alert, a changed threshold, a lost `for:`, an extra name."""
    rules = _rules()
    doc = OBSERVABILITY.read_text()
    renamed = doc.replace("TxnadminTransactionsHanging", "TxnadminTransactionsHung")
    assert {"not in the docs: TxnadminTransactionsHanging",
            "named in the docs, not in the rules: TxnadminTransactionsHung"} <= set(alert_doc_problems(rules, renamed))
    threshold = doc.replace("(txnadmin_transaction_buffer_recovery_age_seconds) > 300",
                            "(txnadmin_transaction_buffer_recovery_age_seconds) > 600")
    assert threshold != doc
    assert alert_doc_problems(rules, threshold) == [
        "TxnadminTransactionBufferRecoveringTooLong: the expression shown is not the rule's"]
    lost_for = doc.replace("severity `warning`, `for: 30m`", "severity `warning`, `for: 10m`")
    assert lost_for != doc
    assert alert_doc_problems(rules, lost_for) == ["PulsarMaxReadPositionStalled: `for: 30m` not stated"]
    extra = doc + "\nAlso see `PulsarCoordinatorDown`.\n"
    assert alert_doc_problems(rules, extra) == ["named in the docs, not in the rules: PulsarCoordinatorDown"]


def test_metrics_md_names_no_alert_the_rules_lack():
    assert set(ALERT_NAME.findall((DOCS / "metrics.md").read_text())) <= set(_rules())


def _slug(heading: str) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(), re.M)}


def test_links_land_on_headings():
    doc = OBSERVABILITY.read_text()
    links = re.findall(r"\]\(([a-z-]*\.md)?#([a-z0-9_-]+)\)", doc)
    assert links
    for page, anchor in links:
        assert anchor in _anchors(DOCS / page if page else OBSERVABILITY), f"{page}#{anchor}"
