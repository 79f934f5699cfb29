"""Moved to pyfastdec/training/rehash.py, so that `fastdec train-heads` runs from an
installed package. This name stays an alias of that module (the same module object), for
the export/ code, tests and benches that import it from here."""
import sys

from pyfastdec.training import rehash as _moved

if __name__ == "__main__":  # python -m export.rehash
    raise SystemExit(_moved.main())

sys.modules[__name__] = _moved
