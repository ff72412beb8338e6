"""Batch-index ack sets as Pulsar stores them: long[] words, bit i in word i//64, LSB first, 1 = not yet deleted."""

from __future__ import annotations


def has_bit(words: list[int] | None, index: int) -> bool:
    if not words:
        return False
    word = index // 64
    return word < len(words) and bool((words[word] >> (index % 64)) & 1)
