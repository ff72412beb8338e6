"""The public surface is what it claims to be, and both backends satisfy the protocol."""

from __future__ import annotations

import inspect

import txnadmin.admin as admin
import txnadmin.codec as codec
import txnadmin.scan as scan
from txnadmin.admin.protocol import TransactionsAdmin


def test_all_lists_exactly_the_public_names():
    for module in (admin, codec, scan):
        public = {n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n))}
        assert set(module.__all__) == public, module.__name__


def test_both_backends_implement_every_protocol_method():
    methods = {n for n, v in vars(TransactionsAdmin).items() if callable(v) and not n.startswith("_")}
    for cls in (admin.LocalAdmin, admin.HttpAdmin):
        missing = {m for m in methods if not callable(getattr(cls, m, None))}
        assert not missing, (cls.__name__, missing)
        for m in methods:
            proto = list(inspect.signature(getattr(TransactionsAdmin, m)).parameters)
            impl = list(inspect.signature(getattr(cls, m)).parameters)
            assert impl == proto, (cls.__name__, m)
