"""HttpAdmin's map of which broker owns which bundle (admin/_bundles.py) against the engine's own placement of topics
in bundles (engine/cluster/bundles.py, after Pulsar's NamespaceBundles.findBundle), and against garbage replies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from txnadmin.admin._bundles import BundleOwners, owned_bundles
from txnadmin.engine.cluster.bundles import bundle_of, bundle_ranges

STATUS = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
LOCAL = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_characters="/%"), min_size=1,
                max_size=30).filter(lambda s: s.strip())  # a blank local name is not a topic


@settings(max_examples=200, deadline=None)
@given(local=LOCAL, count=st.integers(1, 16), brokers=st.integers(1, 4))
def test_the_predicted_owner_is_the_owner_of_the_bundle_the_engine_places_the_topic_in(local, count, brokers):
    topic = f"persistent://public/default/{local}"
    owned: dict[str, dict] = {}
    for i, (lower, upper) in enumerate(bundle_ranges(count)):
        owned.setdefault(f"http://b{i % brokers}:8080", {})[f"public/default/0x{lower:08x}_0x{upper:08x}"] = STATUS
    table = BundleOwners()
    for base, reply in owned.items():
        table.add(base, owned_bundles(reply))
    expected = next(base for base, reply in owned.items() if bundle_of(topic, count) in reply)
    assert table.owner(topic) == expected
    assert table.owner(f"persistent://public/other/{local}") is None  # a namespace nobody said it owns
    table.drop(expected)
    assert table.owner(topic) is None


def test_an_inactive_bundle_and_names_of_another_form_are_not_taken():
    reply = {"public/default/0x00000000_0x80000000": {**STATUS, "is_active": False},
             "public/default/0x80000000_0xffffffff": STATUS, "a/cluster/ns/0x00000000_0xffffffff": STATUS,
             "public/default/0x80000000_0x00000000": STATUS, "nonsense": STATUS}
    assert owned_bundles(reply) == [("public/default", 0x80000000, 0xFFFFFFFF)]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=40), inner,
                                                                                 max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(reply=JSON)
def test_any_reply_is_bundles_or_a_value_error(reply):
    try:
        found = owned_bundles(reply)
    except ValueError:
        return
    assert all(isinstance(ns, str) and 0 <= lo < hi <= 0xFFFFFFFF for ns, lo, hi in found)
