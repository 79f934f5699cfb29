"""Moved to the package: `fastdec train-heads` (pyfastdec/training/heads_command.py, the
stages in pyfastdec/training/heads.py), so that it runs from an installed wheel with the
`train` extra. `python -m export.train_heads MODEL_DIR --sources FILE --out NEW_DIR` is
the same command; importing this name gives the stages module."""
import sys

from pyfastdec.training import heads as _moved

if __name__ == "__main__":
    from pyfastdec.training.heads_command import main

    raise SystemExit(main(prog="python -m export.train_heads"))

sys.modules[__name__] = _moved
