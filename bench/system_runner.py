"""What a system loader returns (bench/systems.py, bench/marian.py): the loaded decoder.

Its own module so that the loaders of every peer can build one without importing each
other (bench.systems picks the loader; bench.marian is one of them).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Runner:
    decode: object  # callable: list[list[int]] -> list[list[int]]
    info: dict = field(default_factory=dict)
    counters: dict = field(default_factory=dict)  # decoding statistics summed over calls
