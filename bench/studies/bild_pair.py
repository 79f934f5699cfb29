"""The BiLD pair the BiLD benches run: --big and --little (the shipped en-de-big and
en-de-little by default), loaded at --threads, with the lossless fallback Translator
uses with that little model (bench.models.bild_defaults)."""
from __future__ import annotations

import argparse
from pathlib import Path

from pyfastdec.backends.native import NativeBackend
from pyfastdec.text import Tokenizer

from bench.models import bild_defaults

REPO = Path(__file__).resolve().parents[2]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--big", type=Path, default=REPO / "models" / "en-de-big")
    ap.add_argument("--little", type=Path, default=REPO / "models" / "en-de-little")
    ap.add_argument("--threads", type=int, default=1)


def load(args) -> tuple[NativeBackend, NativeBackend, float, Tokenizer]:
    """(big, little, the little model's lossless fallback, the big model's tokenizer)."""
    big = NativeBackend(args.big, threads=args.threads)
    little = NativeBackend(args.little, threads=args.threads)
    return big, little, bild_defaults(args.little)["lossless"], Tokenizer(args.big / "spm.model")
