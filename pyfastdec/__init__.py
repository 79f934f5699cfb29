"""pyfastdec: fast CPU decoding of seq2seq translation and correction models.

The public names are imported on first use (PEP 562), so `import pyfastdec.cli` does
not load numpy, sentencepiece and the engine: the `fastdec` command starts fast and
handles a Ctrl-C that arrives while they load (cli.main)."""
from __future__ import annotations

import importlib

from pyfastdec._version import __version__

_PUBLIC = {"cpu_info": "pyfastdec.runtime", "default_threads": "pyfastdec.runtime", "ThreadPool": "pyfastdec.runtime",
           "Corrector": "pyfastdec.api", "LongInputWarning": "pyfastdec.api", "Translator": "pyfastdec.api"}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pyfastdec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
