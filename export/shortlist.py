"""Build a lexical shortlist (shortlist.bin) from a parallel corpus with IBM Model 1.

    python -m export.shortlist --src train.src --tgt train.distilled.tgt \
        --spm spm.model --out shortlist.bin [--frequent 100] [--best 100] [--iterations 5] \
        [--probs] [--identity]
    python -m export.shortlist rewrite IN OUT [--drop-probs] [--version 2]

The targets should be the teacher's distilled translations: the shortlist then covers
what the student is trained to produce. The shortlist is the `frequent` most frequent
target ids (plus unk/bos/eos) and, per source id, its `best` most probable target ids
under t(target | source), written as format version 2 (export/SHORTLIST_FORMAT.md).
The probabilities are left out unless --probs: nothing at inference reads them (the
engine uses only the ids, in their stored best-first order), and the Marian export
(pyfastdec/convert/marian_npz_export.py) ranks by that order when there are none; without them
an 8k-vocabulary shortlist is a third of its size with them.
With --identity every source id's row starts with the id itself (stored with probability
1), then its best-1 most probable other targets: for a correction model, which mostly
copies its input, copying every source piece must stay possible whatever IBM Model 1
estimated (it leaves some seen ids out of their own rows, and ids never seen in the
training sources have empty rows).
`rewrite` converts an existing file (version 1 to 2, dropping the probabilities) with the
same candidates. Only numpy is needed (and sentencepiece for the command line);
the file format and the reader are in pyfastdec/model_dir/shortlist.py, IBM Model 1 and the selection
in pyfastdec/convert/ibm1_shortlist.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from pyfastdec.model_dir.shortlist import KNOWN_VERSIONS, VERSION, Shortlist
# The builder moved into the package (fastdec convert marian --shortlist runs it from a
# wheel); these names stay importable from here for the training side and the tests.
from pyfastdec.convert.ibm1_shortlist import build_shortlist, read_parallel, train_ibm1  # noqa: F401 (tests)

def _special_ids(sp) -> tuple[tuple[int, ...], int]:
    """(always-included ids, first id usable as padding) from the sentencepiece model."""
    always = tuple(i for i in (sp.unk_id(), sp.bos_id(), sp.eos_id()) if i >= 0)
    control = [i for i in (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) if i >= 0]
    mask = sp.piece_to_id("<mask>")
    if mask != sp.unk_id():
        control.append(mask)
    return always, max(control, default=-1) + 1


def _load_spm(path: Path):
    import sentencepiece          # only the command line needs it
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except RuntimeError as err:   # sentencepiece reports missing/corrupt models this way
        raise ValueError(f"{path}: cannot load the sentencepiece model ({err})") from None


def rewrite(src: Path, out: Path, *, drop_probs: bool = False, version: int = VERSION) -> Shortlist:
    """Write src's shortlist to out (atomically) in `version`, without probabilities if asked.

    The result is read back and compared array by array with src, so every sentence keeps
    exactly the candidates (and row order) it had."""
    old = Shortlist.load(src)
    new = Shortlist(old.vocab_size, old.frequent, old.indptr, old.targets,
                    None if drop_probs else old.probs, best=old.best,
                    first_fill_id=old.first_fill_id)
    new.save(out, version=version)
    back = Shortlist.load(out)
    for name in ("frequent", "indptr", "targets", "probs"):
        a, b = getattr(new, name), getattr(back, name)
        if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
            raise ValueError(f"{out}: {name}: reads back different from {src}")
    if (back.vocab_size, back.best, back.first_fill_id) != (old.vocab_size, old.best, old.first_fill_id):
        raise ValueError(f"{out}: header: vocab_size, best or first_fill_id differ from {src}")
    return back


def rewrite_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m export.shortlist rewrite",
                                 description="Rewrite a shortlist.bin in another format version, "
                                             "optionally without probabilities; same candidates.")
    ap.add_argument("src", type=Path, metavar="IN")
    ap.add_argument("out", type=Path, metavar="OUT", help="may be IN (replaced atomically)")
    ap.add_argument("--drop-probs", action="store_true", help="leave out the probability section")
    ap.add_argument("--version", type=int, default=VERSION, choices=KNOWN_VERSIONS,
                    help="file format version to write (default %(default)s)")
    args = ap.parse_args(argv)
    try:
        size_before = args.src.stat().st_size
        rewrite(args.src, args.out, drop_probs=args.drop_probs, version=args.version)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {size_before} -> {args.out.stat().st_size} bytes (version "
          f"{args.version}{', no probabilities' if args.drop_probs else ''})", file=sys.stderr)
    return 0


def record_in_model_dir(out: Path) -> None:
    """A shortlist.bin written into a model directory whose config.json has checksums is
    recorded there (export.rehash): pyfastdec refuses a checksummed directory's shortlist
    that its checksum does not list."""
    from pyfastdec.model_dir import CONFIG_FILE, SHORTLIST_FILE, load_config_json

    config = Path(out).parent / CONFIG_FILE
    if Path(out).name == SHORTLIST_FILE and config.is_file() and "checksum" in load_config_json(config):
        from .rehash import rehash

        rehash(Path(out).parent)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["rewrite"]:
        return rewrite_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m export.shortlist", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="source sentences (.gz ok)")
    ap.add_argument("--tgt", type=Path, required=True, help="target sentences, line-parallel")
    ap.add_argument("--spm", type=Path, required=True, help="joint sentencepiece model")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--frequent", type=int, default=100, help="most frequent target ids kept")
    ap.add_argument("--best", type=int, default=100, help="best target ids per source id")
    ap.add_argument("--iterations", type=int, default=5, help="EM iterations")
    ap.add_argument("--identity", action="store_true",
                    help="every source id lists itself first (correction: copying stays possible); "
                         "--best counts it")
    probs = ap.add_mutually_exclusive_group()
    probs.add_argument("--probs", action="store_true", help="keep t(e|f) in a probability section")
    probs.add_argument("--no-probs", action="store_true",
                       help="omit the probability section (the default; kept for old scripts)")
    ap.add_argument("--version", type=int, default=VERSION, choices=KNOWN_VERSIONS,
                    help="file format version to write (default %(default)s)")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr)

    try:
        sp = _load_spm(args.spm)
        src_lines, tgt_lines = read_parallel(args.src, args.tgt)
        src_ids, tgt_ids = sp.encode(src_lines), sp.encode(tgt_lines)
        log(f"{len(src_ids)} sentence pairs, {sum(map(len, src_ids))} source and "
            f"{sum(map(len, tgt_ids))} target tokens")
        always, first_fill_id = _special_ids(sp)
        shortlist = build_shortlist(src_ids, tgt_ids, sp.get_piece_size(), args.frequent,
                                    args.best, args.iterations, always=always,
                                    first_fill_id=first_fill_id,
                                    keep_probs=args.probs, identity=args.identity, log=log)
        shortlist.save(args.out, version=args.version)
        record_in_model_dir(args.out)
    except (OSError, ValueError) as err:
        log(f"error: {err}")
        return 1
    log(f"wrote {args.out}: {shortlist.frequent.size} frequent ids, "
        f"{shortlist.targets.size} source->target entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
