"""`python -m pyfastdec.convert` and `fastdec convert`: one subcommand per converter of
this package, each imported only when chosen (ctranslate2 needs the bench extra), and
every refusal printed as one line `error: ...` with exit status 2 (1 for an unreadable
input or no memory, 130 when interrupted)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyfastdec.convert.ctranslate2_export import DEFAULT_MAX_POSITIONS, MAX_POSITIONS


def main(argv: Sequence[str] | None = None, prog: str = "python -m pyfastdec.convert") -> int:
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Convert a pyfastdec model directory for another engine, "
                                                 "or import a Hugging Face or Marian (.npz) model.")
    sub = parser.add_subparsers(dest="target", required=True)
    ct2 = sub.add_parser("ctranslate2", help="write a CTranslate2 model (needs the 'bench' extra)")
    ct2.add_argument("model_dir", help="pyfastdec model directory (config.json, model.safetensors, spm.model)")
    ct2.add_argument("out_dir", help="output CTranslate2 model directory")
    ct2.add_argument("--quantization", default=None,
                     help="CTranslate2 weight type: int8, int8_float32, int16, float32, ... (default: float32)")
    ct2.add_argument("--max-positions", type=int, default=DEFAULT_MAX_POSITIONS,
                     help=f"rows of the position table (longest source / decoder input; default "
                          f"{DEFAULT_MAX_POSITIONS}, at most {MAX_POSITIONS})")
    ct2.add_argument("--force", action="store_true", help="replace an existing output directory")
    mz = sub.add_parser("marian-npz", help="write a Marian model (model.npz, vocabularies, lexical shortlist)")
    mz.add_argument("model_dir", help="pyfastdec model directory")
    mz.add_argument("out_dir", help="output directory (model.npz, vocab.src.spm, vocab.trg.spm, lex.s2t, decoder.yml)")
    mz.add_argument("--force", action="store_true", help="replace an existing output directory")
    mi = sub.add_parser("marian-npz-in", help="read a Marian .npz checkpoint into a pyfastdec model directory")
    mi.add_argument("npz", help="Marian model .npz (with its special:model.yml)")
    mi.add_argument("vocab", help="its sentencepiece vocabulary (.spm), shared by source and target")
    mi.add_argument("out_dir", help="output pyfastdec model directory (float32)")
    mi.add_argument("--shortlist", nargs=3, metavar=("LEX", "FIRST", "BEST"),
                    help="Marian's text lexical shortlist and its FIRST / BEST, as given to marian --shortlist")
    mi.add_argument("--allow-unk", action="store_true",
                    help="let the model emit unk (Marian's --allow-unk); by default unk is never generated, as in Marian")
    mi.add_argument("--force", action="store_true", help="replace an existing output directory")
    marian = sub.add_parser("marian", help="import a saved Hugging Face MarianMTModel directory (OPUS-MT)")
    marian.add_argument("hf_dir", help="save_pretrained output: config.json, model.safetensors or "
                                       "pytorch_model.bin, source.spm, target.spm, vocab.json")
    marian.add_argument("out_dir", help="output pyfastdec model directory")
    marian.add_argument("--quantize", choices=("float32", "int8"), default=None,
                        help="int8: weights quantised per row, a quarter of the size; activations scaled per "
                             "row at run time unless --calibrate is given: no text needed, and measured as fast "
                             "and as accurate as calibrated scales (bench/README.md) (default float32)")
    marian.add_argument("--calibrate", metavar="TEXT_FILE",
                        help="int8 with static activation scales calibrated on these source sentences (one per "
                             "line, up to 2000 used): slightly faster than the default dynamic scales, and "
                             "tied to text like this")
    marian.add_argument("--shortlist", nargs=2, metavar=("SRC", "TGT"),
                        help="parallel text to build a lexical shortlist from")
    marian.add_argument("--force", action="store_true", help="replace an existing output directory")
    q8 = sub.add_parser("int8", help="write the int8 form of a float32 pyfastdec model directory")
    q8.add_argument("model_dir", help="float32 pyfastdec model directory")
    q8.add_argument("out_dir", help="output int8 model directory")
    q8.add_argument("--calibrate", metavar="TEXT_FILE",
                    help="static activation scales calibrated on these source sentences (attention-decoder "
                         "models); default: dynamic per-row scales, no text needed")
    q8.add_argument("--force", action="store_true", help="replace an existing output directory")
    args = parser.parse_args(argv)
    try:
        if args.target == "int8":
            from pyfastdec.convert.int8 import to_int8

            out = to_int8(args.model_dir, args.out_dir, args.calibrate, args.force)
        elif args.target == "marian":
            from pyfastdec.convert.hf_marian_import import convert_marian

            out = convert_marian(args.hf_dir, args.out_dir, args.quantize, args.calibrate,
                                 tuple(args.shortlist) if args.shortlist else None, args.force)
        elif args.target == "marian-npz-in":
            from pyfastdec.convert.marian_npz_import import from_marian_npz

            shortlist = None
            if args.shortlist:
                lex, first, best = args.shortlist
                if not (first.isdigit() and best.isdigit()):
                    raise ValueError(f"--shortlist {lex} {first} {best}: FIRST and BEST must be non-negative integers")
                shortlist = (lex, int(first), int(best))
            out = from_marian_npz(args.npz, args.vocab, args.out_dir, shortlist=shortlist, allow_unk=args.allow_unk,
                                  force=args.force)
        elif args.target == "marian-npz":
            from pyfastdec.convert.marian_npz_export import to_marian_npz

            out = to_marian_npz(args.model_dir, args.out_dir, force=args.force)
        else:
            from pyfastdec.convert.ctranslate2_export import to_ctranslate2

            out = to_ctranslate2(args.model_dir, args.out_dir, args.quantization, args.max_positions, args.force)
    except (ValueError, ImportError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # an input that cannot be read (outputs are restated by pyfastdec/model_dir/staging.py)
        print(f"error: {err.filename + ': ' if err.filename else ''}{err.strerror or err}", file=sys.stderr)
        return 1
    except MemoryError:
        print("error: out of memory", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the staging directory is already removed
        print("error: interrupted; nothing was written", file=sys.stderr)
        return 130
    print(out)
    return 0

