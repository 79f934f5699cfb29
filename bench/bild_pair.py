"""The BiLD pair the BiLD benches run: --big and --little (the shipped en-de-big and
en-de-little by default), loaded at --threads, with the little model's own lossless
fallback."""
from __future__ import annotations

import argparse
from pathlib import Path

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.bild import DEFAULT_FALLBACK
from pyfastdec.text import Tokenizer

REPO = Path(__file__).resolve().parents[1]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--big", type=Path, default=REPO / "models" / "en-de-big")
    ap.add_argument("--little", type=Path, default=REPO / "models" / "en-de-little")
    ap.add_argument("--threads", type=int, default=1)


def load(args) -> tuple[NativeBackend, NativeBackend, float, Tokenizer]:
    """(big, little, the little model's lossless fallback, the big model's tokenizer)."""
    big = NativeBackend(args.big, threads=args.threads)
    little = NativeBackend(args.little, threads=args.threads)
    fallback = (little.config.bild or {}).get("fallback", DEFAULT_FALLBACK)
    return big, little, fallback, Tokenizer(args.big / "spm.model")
