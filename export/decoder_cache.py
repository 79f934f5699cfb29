"""Moved to pyfastdec/training/decoder_cache.py, so that `fastdec train-heads` runs from an
installed package. This name stays an alias of that module (the same module object), for
the export/ code, tests and benches that import it from here."""
import sys

from pyfastdec.training import decoder_cache as _moved

sys.modules[__name__] = _moved
