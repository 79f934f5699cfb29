"""pyfastdec: fast CPU decoding of seq2seq translation and correction models.

The public names are imported on first use (PEP 562), so `import pyfastdec.cli` does
not load numpy, sentencepiece and the engine: the `fastdec` command starts fast and
handles a Ctrl-C that arrives while they load (cli.main)."""
from __future__ import annotations

import sys


def _hold_sigint_for_the_command():
    """The `fastdec` command (pyfastdec.cli: the console script, or python -m) holds Ctrl-C
    back from this, its first line of Python, until its modules have loaded; cli.py then
    delivers it as one line and exit 130, where a KeyboardInterrupt inside an import would
    be a long traceback. Returns the signal mask to restore, or None: only while this
    package is imported on the way to pyfastdec.cli (the importing frames say so; there is
    no other sign this early) is the mask touched, never by a library import."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_name
        if ((name == "_find_and_load" and frame.f_locals.get("name") == "pyfastdec.cli")
                or (name == "_get_module_details" and frame.f_locals.get("mod_name") == "pyfastdec.cli")):
            import _signal  # built in and already loaded: no import time for a Ctrl-C to land in

            if hasattr(_signal, "pthread_sigmask"):
                return _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
            return None
        frame = frame.f_back
    return None


_MASK_BEFORE_CLI = _hold_sigint_for_the_command()  # taken (and restored) by pyfastdec.cli

import importlib  # noqa: E402

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
