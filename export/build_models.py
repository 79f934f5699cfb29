"""Build the trained models of models/ from the shared data: one command per model.

    python -m export.build_models en-de            # teacher -> distillation -> SSRU student
    python -m export.build_models en-de-attn en-de-drafter uk-gec
    python -m export.build_models all --runs /work/runs --threads 2

Each model is a chain of resumable stages; a stage whose output exists is skipped, a
training stage left unfinished resumes from its checkpoint (export.train), so the same
command can be run again after an interruption. Runs, checkpoints and distilled data go
to --runs (outside the repository); only the final model directories go to --models.

  teacher-en-de  train the teacher (recipe teacher-en-de), write runs/models/teacher-en-de
  distill-en-de  beam-5 translations of the training sources by that teacher (native engine)
  en-de          student-en-de-ssru from the teacher (--init), on the distilled targets;
                 int8 (activation scales calibrated on val) + IBM-1 shortlist; then its
                 blockwise proposal heads (export.train_heads, verifier frozen, on its own
                 greedy outputs of the training sources)
  en-de-attn     the same student with an attention decoder
  en-de-drafter  the NAT block drafter sharing en-de's encoder (issue 15): first a drafter
                 with its own encoder, from the teacher, on the distilled targets (kept in
                 runs/separate/en-de-drafter), whose decoder then trains over en-de's frozen
                 encoder on en-de's own greedy outputs (export.train_shared drafter); int8;
                 block size chosen on val with en-de as verifier (export/choose_block.py)
  en-de-big      BiLD's big model (issue 15): the teacher itself in int8 (activation scales
                 calibrated on val, not pruned) with an IBM-1 shortlist on the training pairs
  teacher-en-de-general, distill-en-de-general, en-de-general
                 the same chain on the general-domain set (issue 32, export.general_en_de:
                 $FASTDEC_GENERAL_EN_DE): its corpus is its teacher recipe's, so distillation,
                 shortlist pairs, proposal-head sources and held-out counts read the general
                 files (CHAINS). The teacher is a GPU's work (tools/device/
                 train_general_en_de.sh, or --device cuda) or --from the checkpoint a device
                 call returned; distillation is greedy (GENERAL_BEAM); each of the three
                 takes --from what a device call gave it (the teacher it carried, and
                 train.de.gz and student/ of tools/device/train_general_student.sh),
                 kept under runs/returned/ for later commands
  en-de-little   BiLD's little model over en-de-big's encoder: the strongest head and 128
                 FFN units of en-de-big's first decoder layer, trained on en-de-big's greedy
                 outputs (export.train_shared little --shape 1,128), 18,300 steps: 6
                 minutes on one GPU with --device cuda, about 2 hours on 2 CPU cores;
                 its fallback/rollback thresholds chosen on val (export/choose_bild.py)
  uk-gec-base    the base-size correction model (issue 29): recipe uk-gec-base-synth, then
                 uk-gec-base from it (both with --device; a GPU's work:
                 tools/device/train_uk_gec_base.sh), or --from the checkpoint a device call
                 returned (export.compact_ckpt folder, or a .pt); then on the CPU: int8
                 (scales calibrated on val), the GEC shortlist, the edit margin
                 (choose_margin) and the repetition guard (choose_guard, a report) on val.
                 Written to ~/.cache/pyfastdec/models/uk-gec-base unless --models is given:
                 ~37 MB, too large for the wheel and for the 64 MiB a device call carries
  uk-gec         the Ukrainian correction model (UA-GEC gec-only corpus, export.uagec); int8;
                 an IBM-1 shortlist on the UA-GEC training pairs in which every source piece
                 lists itself (GEC_SHORTLIST); its edit margin chosen on val
                 (export/choose_margin.py: decoding.edit_margin, 0 unless significant)

Every model except the teacher (and en-de-big, which is the teacher) is then pruned
(export.prune: group lasso over heads and FFN units, slicing, fine-tuning on the same
data, int8 again) before its shortlist, block size or proposal heads are made, so those
are made for the pruned model.

A model is written from whichever of the run's final checkpoints (averaged or best)
scores higher on the validation set (results.json of export.train).
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from pyfastdec.training.heads_command import main as train_heads_main
from pyfastdec.training.rehash import rehash

from . import choose_bild, choose_block, choose_guard, choose_margin, compact_ckpt, distill, prune, shortlist, train, \
    train_shared, uagec, write
from .build_chains import CHAINS, EN_DE, FROM_TARGETS, GENERAL, Chain, checkpoint_identity, keep_returned
from .data import cache_root, corpus_path, read_lines
from .recipes import get_recipe

REPO = Path(__file__).resolve().parents[1]
# The recipe (export/recipes.py) each trained model comes from.
RECIPE_OF = {"teacher-en-de": "teacher-en-de", "en-de": "student-en-de-ssru", "en-de-attn": "student-en-de-attn",
             "en-de-drafter": "drafter-en-de", "uk-gec": "uk-gec",
             "teacher-en-de-general": "teacher-en-de-general", "en-de-general": "student-en-de-general"}
# Proposal heads trained into a model after it is written: K heads, training steps
# (3,000 steps of 256 positions: about 20 CPU minutes after the greedy outputs and states).
HEADS = {"en-de": (4, 3000), "en-de-general": (4, 3000)}
# Structured pruning after training (export/prune.py, issue 14): the kept share of each
# group kind, and the minutes of its group-lasso and fine-tuning stages (1 thread each).
PRUNE_KEEP = "enc_heads=0.5,enc_ffn=0.3,dec_heads=0.75,dec_ffn=0.5"
# The attention student lost 0.87 val BLEU after 12 fine-tuning minutes, 0.45 after 36;
# uk-gec gained 2.7 between 12 and 24 and was still improving: the shipped one had 24
# minutes, then 60 more from its int8 directory (issue 16, models/README.md); the drafter
# needs less cut to fit 8 MB.
PRUNE = {"en-de": (PRUNE_KEEP, 15, 12), "en-de-general": (PRUNE_KEEP, 15, 12), "en-de-attn": (PRUNE_KEEP, 15, 36),
         "en-de-drafter": ("enc_heads=0.75,enc_ffn=0.5,dec_heads=1.0,dec_ffn=0.5", 15, 12),
         "uk-gec": (PRUNE_KEEP, 15, 84)}
# The uk-gec shortlist (export.shortlist on the UA-GEC training pairs): every source piece
# first lists itself (--identity: a correction mostly copies, and IBM-1 alone leaves some
# pieces out of their own lists), then its 19 most probable other pieces, plus the 100 most
# frequent target pieces: ~170 candidates per sentence instead of 8,000, with greedy's F0.5
# on UA-GEC val and test within 0.002 of the full vocabulary's (models/README.md).
GEC_SHORTLIST = ("--frequent", "100", "--best", "20", "--identity")
# Minutes of export.train_shared for the models that read another's encoder (the drafter
# on 1 thread, the little model on --threads).
SHARED_MINUTES = {"en-de-drafter": 45, "en-de-little": 240}
# ...and the step budgets of those that stop at a step count (the same on any --device):
# the little model over en-de-big took 18,300 steps of 4,000 tokens to reach 82 % held-out
# agreement, 6.3 minutes on an H200 (--device cuda), about 2 hours of 2 CPU cores (a CPU
# run stood at 1,780 steps and loss 1.30 after 11.6 minutes; the GPU run ended at 0.93).
SHARED_STEPS = {"en-de-little": 18300}
# BiLD's little model: 1 head and 128 FFN units of the big model's first decoder layer, the
# strongest (export.train_shared --shape). At batch 1 a step costs the weight bytes it
# streams: over en-de-attn (session 8) the full layer (2 heads, FFN 521) made BiLD 0.93x
# greedy on val, this shape 1.15x; over en-de-big, trained 18,300 steps each on a GPU,
# 1,128 / 2,256 / two 1,128 layers / the whole layer agreed 82.4 / 84.8 / 85.7 / 86.6 %
# and made lossless BiLD 1.12 / 1.09 / 1.03 / 0.94x greedy on val (200 sentences, fallback 0.6).
LITTLE_SHAPE = "1,128"
# BiLD's big model and little model (issue 15: the largest model the project trains).
BIG, LITTLE = "en-de-big", "en-de-little"
# Training budgets in minutes per recipe (all runs of a stage together; 2 cores).
MINUTES = {"teacher-en-de": 150, "student-en-de-ssru": 25, "student-en-de-attn": 25, "drafter-en-de": 25,
           "uk-gec": 90, "uk-gec-base-synth": 6, "uk-gec-base": 2,
           "teacher-en-de-general": 900, "student-en-de-general": 150}
# The recipes export.train runs on --device (the rest on the CPU): the general chain's
# ~151k pairs take hours per model on 2 cores, minutes on a GPU.
DEVICE_RECIPES = ("teacher-en-de-general", "student-en-de-general")
# config.json "description" of each model built (fastdec info prints the defaults'): what
# it was trained on and what it is good for, one line, true of every build of it.
_CAPTIONS = "trained only on Multi30k's 29,000 English image captions and their German translations"
_NOT_GENERAL = ("not for general text (news, chat, documents): for that, convert an OPUS-MT model "
                "(README, \"Translate real text\")")
DESCRIPTIONS = {
    "en-de": f"English->German student, {_CAPTIONS} (distilled from teacher-en-de): good for short caption-like "
             f"sentences and for trying the engine; {_NOT_GENERAL}",
    "en-de-attn": f"en-de's student with an attention decoder, {_CAPTIONS}: the benchmarks' model for engines "
                  f"without SSRU; {_NOT_GENERAL}",
    "en-de-drafter": f"GAD block drafter reading en-de's encoder, {_CAPTIONS}: drafts for en-de, not a translator "
                     "on its own",
    BIG: f"teacher-en-de in int8, {_CAPTIONS}: BiLD's big model for the benchmarks; {_NOT_GENERAL}",
    LITTLE: f"BiLD's little model over en-de-big's encoder, {_CAPTIONS}: drafts for en-de-big, not a translator "
            "on its own",
    "uk-gec": "Ukrainian grammatical error correction, trained on UA-GEC (gec-only annotation layer): a "
              "conservative corrector of Ukrainian prose, not a rewriter; text in other scripts comes back unchanged",
    "uk-gec-base": "Ukrainian grammatical error correction, base size: pretrained on synthetic errors in UA-GEC's "
                   "corrected sentences, then trained on UA-GEC (gec-only annotation layer)",
    "en-de-general": "English->German student, trained on ~151k general-domain pairs (WMT news, Tatoeba's "
                     "everyday sentences, support chat, Wikipedia post-edits, Multi30k and more: data/README.md), "
                     "distilled from teacher-en-de-general: meant for ordinary text; its scores: python -m "
                     "export.general_report",
}
# config.json "task" of each model built that translates or corrects on its own (drafters
# have none): `fastdec correct` refuses a translation model.
TASKS = {"en-de": "translation", "en-de-attn": "translation", BIG: "translation", "en-de-general": "translation",
         "uk-gec": "correction", "uk-gec-base": "correction"}
# uk-gec-base: its two recipes, and where the model goes (not models/: ~37 MB).
GEC_BASE, GEC_BASE_SYNTH = "uk-gec-base", "uk-gec-base-synth"


def gec_base_home() -> Path:
    """$XDG_CACHE_HOME (default ~/.cache)/pyfastdec/models: where uk-gec-base is written."""
    return cache_root() / "models"


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), "[build_models]", msg, flush=True)


class Builder:
    """recipes: model name -> recipe (RECIPE_OF); train_args: extra export.train arguments
    (tests pass --max-steps); heads: model name -> (K, steps) of its proposal heads (HEADS);
    shared_minutes: training minutes of the models that read another's encoder (SHARED_MINUTES);
    shared_steps: their step budgets (SHARED_STEPS); device: the torch device they and
    DEVICE_RECIPES train on; from_: target -> what --from gave it (FROM_TARGETS)."""

    def __init__(self, runs: Path, models: Path, threads: int, minutes: dict[str, float],
                 recipes: dict[str, str] | None = None, train_args: tuple[str, ...] = (),
                 heads: dict[str, tuple[int, int]] | None = None,
                 pruning: dict[str, tuple[str, float, float]] | None = None,
                 shared_minutes: dict[str, float] | None = None, shared_steps: dict[str, int] | None = None,
                 device: str = "cpu", from_: dict[str, Path] | None = None, gec_base_home: Path | None = None):
        self.runs, self.models, self.threads, self.minutes = runs, models, threads, minutes
        self.recipes = dict(recipes or RECIPE_OF)
        self.train_args = list(train_args)
        self.heads_of = dict(HEADS if heads is None else heads)
        self.prune_of = dict(PRUNE if pruning is None else pruning)
        self.shared_minutes = dict(SHARED_MINUTES if shared_minutes is None else shared_minutes)
        self.shared_steps = dict(SHARED_STEPS if shared_steps is None else shared_steps)
        self.device = device
        self.from_, self.gec_base_home = dict(from_ or {}), gec_base_home

    # ------------------------------------------------------------------ stages
    def train(self, name: str, *extra: str) -> Path:
        """Train (or resume, or find finished) the run of model `name`; its chosen checkpoint."""
        recipe = self.recipes[name]
        out = self.runs / recipe
        if not self._finished(out, recipe):
            log(f"training {recipe} -> {out}")
            device = ["--device", self.device] if recipe in DEVICE_RECIPES else []
            train.main(["--recipe", recipe, "--out", str(out), "--minutes", str(self.minutes.get(recipe, 30)),
                        "--threads", str(self.threads), *device, *self.train_args, *extra])
        return choose_checkpoint(out)

    def _finished(self, out: Path, recipe: str) -> bool:
        """results.json is written at the end of every run, so it alone does not mean the
        budget is spent (a run may have been stopped early by an earlier, smaller budget)."""
        if not (out / "results.json").exists():
            return False
        if self.train_args:  # an explicit step limit: one run is the whole job
            return True
        history = json.loads((out / "results.json").read_text()).get("history", [])
        spent = history[-1]["minutes"] if history else 0.0
        return spent >= self.minutes.get(recipe, 30) - 0.5

    def chain_of(self, name: str) -> Chain:
        return next(c for c in CHAINS if name in (c.teacher, c.distill, *c.models))

    def corpus(self, chain: Chain) -> str:
        """The export.data corpus of the chain: its teacher recipe's (multi30k, or the
        general set's absolute directory)."""
        return get_recipe(self.recipes[chain.teacher])["corpus"]

    def returned(self, target: str) -> Path | None:
        """What --from gave `target`, now or in an earlier command (build_chains.keep_returned)."""
        return keep_returned(self.runs, target, self.from_.get(target))

    def teacher(self, chain: Chain = EN_DE) -> tuple[Path, Path]:
        """(checkpoint, float32 model directory) of the chain's teacher: the one --from
        gave, else trained. The directory is rewritten whenever the chosen checkpoint is
        not the one it was written from."""
        ckpt = self.returned(chain.teacher) or self.train(chain.teacher)
        model_dir = self.runs / "models" / chain.teacher
        stamp = model_dir.with_name(model_dir.name + ".source.json")
        if not stamp.exists() or json.loads(stamp.read_text()) != checkpoint_identity(ckpt):
            write.main(["--ckpt", str(ckpt), "--out", str(model_dir)])
            stamp.write_text(json.dumps(checkpoint_identity(ckpt)))
        return ckpt, model_dir

    def distilled(self, chain: Chain = EN_DE) -> Path:
        """Distilled training targets of the chain's current teacher (or those --from
        gave); targets of an earlier teacher are set aside (renamed *.stale), never continued."""
        corpus = self.corpus(chain)
        n_train = train_count(corpus)
        given = self.returned(chain.distill)
        if given is not None:
            lines = len(read_lines(given))
            if lines != n_train:
                raise ValueError(f"--from {given}: {lines} lines, expected one per train source of {corpus} ({n_train})")
            return given
        out = self.runs / chain.distill_dir / "train.de"
        meta = out.with_name(out.name + ".json")
        ckpt, teacher_dir = self.teacher(chain)
        teacher = checkpoint_identity(ckpt)
        if meta.exists() and json.loads(meta.read_text()).get("teacher") != teacher:
            set_aside(out, meta)
            log(f"{out}: made by another teacher checkpoint; set aside as *.stale")
        if meta.exists() and json.loads(meta.read_text()).get("lines") == n_train:
            return out
        if not meta.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(json.dumps({"teacher": teacher, "reference_fallbacks": []}))
        log(f"distilling the training sources with {teacher_dir} -> {out}")
        distill.main(["--model", str(teacher_dir), "--src", "en", "--tgt", "de", "--split", "train",
                      "--corpus", corpus, "--beam", str(chain.beam), "--out", str(out), "--threads", str(self.threads)])
        return out

    def student(self, name: str) -> Path:
        chain = self.chain_of(name)
        targets = self.distilled(chain)
        ckpt = self.returned(name) or self.train(name, "--init", str(self.teacher(chain)[0]),
                                                 "--train-tgt", str(targets))
        out = self.pruned(self.write_int8(ckpt, name), name, targets)
        if name == "en-de-drafter":
            verifier = self.models / "en-de"
            if not (verifier / "config.json").exists():
                self.build("en-de")
            out = self.shared_drafter(out, verifier)
            sizes = get_recipe(self.recipes[name]).get("block_sizes")
            if sizes:
                log(f"choosing the block size of {name} on val with {verifier}")
                choose_block.main(["--verifier", str(verifier), "--drafter", str(out), "--sizes",
                                   *map(str, sizes), "--threads", "1"])
        else:
            log(f"shortlist for {name}")
            shortlist.main(["--src", str(corpus_path("train", "en", self.corpus(chain))), "--tgt", str(targets),
                            "--spm", str(out / "spm.model"), "--out", str(out / "shortlist.bin")])
        if name in self.heads_of:
            out = self.heads(out, name)
        return out

    def shared_drafter(self, separate: Path, verifier: Path) -> Path:
        """The drafter without an encoder over `verifier`'s, its decoder starting from
        `separate`'s (which moves to runs/separate/en-de-drafter); it drafts with the
        verifier's shortlist (attached rows carry it), so it needs none of its own."""
        kept = self.runs / "separate" / separate.name
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(separate, kept)
        log(f"shared-encoder drafter over {verifier}")
        rc = train_shared.main(["drafter", str(verifier), "--init", str(kept), *self._shared_data("en-de-drafter"),
                                "--run", str(self._shared_run("shared-drafter", verifier)), "--out", str(separate)])
        if rc != 0:
            raise RuntimeError(f"export.train_shared failed for {separate} (exit {rc})")
        return separate

    def _shared_run(self, name: str, host: Path) -> Path:
        """runs/<name> for export.train_shared over `host`: a run started over another host
        (or before runs recorded their host's files) is set aside as *.stale, never
        continued; an unfinished run over this host resumes."""
        run = self.runs / name
        recorded = run / "run.json"
        if recorded.exists() and json.loads(recorded.read_text()).get("host_files") != train_shared.host_files(host):
            set_aside(run)
            log(f"{run}: started over another {host.name} (or an older build); set aside as {run.name}.stale")
        return run

    def _shared_data(self, name: str) -> list[str]:
        """export.train_shared's data and budget arguments: the training sources, the last
        500 (a tenth of a small corpus) held out."""
        corpus = self.corpus(self.chain_of(name))
        held_out = held_out_count(corpus)
        return ["--sources", str(corpus_path("train", "en", corpus)), "--held-out", str(held_out),
                "--minutes", str(self.shared_minutes[name]), "--steps", str(self.shared_steps.get(name, 0)),
                "--device", self.device]

    def big(self) -> Path:
        """BiLD's big model: the teacher's chosen checkpoint in int8, unpruned (its weight
        bytes per step are what BiLD saves), with an IBM-1 shortlist on the training pairs
        (there are no distilled targets of its own; the students' are its beam outputs)."""
        ckpt, _ = self.teacher()
        out = self.models / BIG
        stamp = self.runs / "models" / f"{BIG}.source.json"  # the checkpoint it was written from
        if (out / "config.json").exists() and stamp.exists() and \
                json.loads(stamp.read_text()) == checkpoint_identity(ckpt):
            return out  # rewriting would change its bytes, and so every run over it
        out = self.write_int8(ckpt, BIG)
        log(f"shortlist for {BIG}")
        rc = shortlist.main(["--src", str(corpus_path("train", "en", self.corpus(EN_DE))),
                             "--tgt", str(corpus_path("train", "de", self.corpus(EN_DE))),
                             "--spm", str(out / "spm.model"), "--out", str(out / "shortlist.bin")])
        if rc:
            raise RuntimeError(f"export.shortlist failed for {out} (exit {rc})")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(checkpoint_identity(ckpt)))
        return out

    def little(self) -> Path:
        """BiLD's little model over the big model's encoder, with thresholds chosen on val."""
        big = self.models / BIG
        if not (big / "config.json").exists():
            self.build(BIG)
        out = self.models / LITTLE
        log(f"little model over {big}")
        rc = train_shared.main(["little", str(big), "--layers", "0", "--shape", LITTLE_SHAPE,
                                *self._shared_data(LITTLE), "--threads", str(self.threads),
                                "--run", str(self._shared_run("little", big)), "--out", str(out)])
        if rc != 0:
            raise RuntimeError(f"export.train_shared failed for {out} (exit {rc})")
        log(f"BiLD thresholds of {out.name} on val")
        choose_bild.main([str(big), str(out)])
        return out

    def heads(self, plain: Path, name: str) -> Path:
        """`plain` with its proposal heads (HEADS), trained on its own greedy outputs of the
        training sources; the run (greedy outputs, cached states, checkpoints) resumes."""
        count, steps = self.heads_of[name]
        staging = plain.with_name(plain.name + ".heads.tmp")
        corpus = self.corpus(self.chain_of(name))
        held_out = held_out_count(corpus)
        log(f"proposal heads for {name}")
        shutil.rmtree(staging, ignore_errors=True)  # an interrupted build's: the command refuses an existing --out
        rc = train_heads_main([str(plain), "--sources", str(corpus_path("train", "en", corpus)),
                               "--run", str(self.runs / f"heads-{name}"), "--out", str(staging),
                               "--heads", str(count), "--steps", str(steps), "--held-out", str(held_out),
                               "--threads", str(self.threads)])
        if rc != 0:
            raise RuntimeError(f"train-heads failed for {name} (exit {rc})")
        shutil.rmtree(plain)
        staging.rename(plain)
        return plain

    def uk_gec(self) -> Path:
        data = uagec.ensure_corpus()  # extracted from the ua-gec package if missing
        log(f"UA-GEC corpus: {data}")
        out = self.pruned(self.write_int8(self.train("uk-gec"), "uk-gec"), "uk-gec")
        self.gec_shortlist(out, data)
        log(f"edit margin for {out.name}")
        choose_margin.main([str(out), "--threads", str(self.threads)])  # decoding.edit_margin, with the shortlist
        return out

    def uk_gec_base(self) -> Path:
        """uk-gec-base from --from (a device call's export.compact_ckpt folder, or a
        checkpoint), else trained here on --device (synthetic pretraining, then UA-GEC);
        then the CPU chain: int8, shortlist, edit margin, guard report."""
        data = uagec.ensure_corpus()
        source = self.from_.get(GEC_BASE)
        if source is None:
            synth = self.train(GEC_BASE_SYNTH, "--device", self.device, "--no-test")
            ckpt = self.train(GEC_BASE, "--device", self.device, "--init", str(synth))
        elif source.is_dir():
            ckpt = self.runs / GEC_BASE / "returned.pt"
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            packed = compact_ckpt.unpack(source)
            log(f"{source}: {packed['recipe']} step {packed['step']} ({packed['source']}) -> {ckpt}")
            import torch

            torch.save(packed, ckpt)
        else:
            ckpt = source
        out = self.write_int8(ckpt, GEC_BASE, self.gec_base_home or gec_base_home())
        self.gec_shortlist(out, data)
        log(f"edit margin for {out.name}")
        choose_margin.main([str(out), "--threads", str(self.threads)])
        log(f"repetition guard for {out.name} on val")
        report = self.runs / GEC_BASE / "guard.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        choose_guard.main([str(out), "--threads", str(self.threads), "--report", str(report)])
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file()) / 1e6
        log(f"{out}: {size:.1f} MB{' -- OVER the 40 MB target' if size > 40 else ''}")
        return out

    def gec_shortlist(self, out: Path, data: Path) -> Path:
        """out/shortlist.bin from the UA-GEC training pairs in `data` (GEC_SHORTLIST)."""
        log(f"shortlist for {out.name}")
        rc = shortlist.main(["--src", str(data / "train.src.gz"), "--tgt", str(data / "train.tgt.gz"),
                             "--spm", str(out / "spm.model"), "--out", str(out / "shortlist.bin"), *GEC_SHORTLIST])
        if rc != 0:
            raise RuntimeError(f"export.shortlist failed for {out} (exit {rc})")
        return out

    def pruned(self, plain: Path, name: str, targets: Path | None = None) -> Path:
        """`plain` pruned (PRUNE; export.prune, resumable in runs/prune-<name>): the trained
        directory moves to runs/unpruned/<name>, the pruned one takes its place."""
        if name not in self.prune_of:
            return plain
        keep, lasso_minutes, finetune_minutes = self.prune_of[name]
        source = self.runs / "unpruned" / name
        shutil.rmtree(source, ignore_errors=True)
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(plain, source)
        staging = plain.with_name(plain.name + ".prune.tmp")
        log(f"pruning {name}")
        prune.main([str(source), "--recipe", self.recipes[name], "--run", str(self.runs / f"prune-{name}"),
                    "--out", str(staging), "--keep", keep, "--lasso-minutes", str(lasso_minutes),
                    "--finetune-minutes", str(finetune_minutes), "--threads", "1",
                    *(["--train-tgt", str(targets)] if targets else [])])
        staging.rename(plain)
        return plain

    def write_int8(self, ckpt: Path, name: str, home: Path | None = None) -> Path:
        out = (home or self.models) / name
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        write.main(["--ckpt", str(ckpt), "--out", str(staging), "--int8", "--calib", "val",
                    "--threads", str(self.threads)])
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)  # a half-written directory never takes a model's name
        return out

    def build(self, name: str) -> Path:
        out = self._build(name)
        if name in DESCRIPTIONS:
            describe(out, DESCRIPTIONS[name], TASKS.get(name))
        return out

    def _build(self, name: str) -> Path:
        chain = next((c for c in CHAINS if name in (c.teacher, c.distill)), None)
        if chain is not None:
            return self.teacher(chain)[1] if name == chain.teacher else self.distilled(chain)
        if name == "uk-gec":
            return self.uk_gec()
        if name == GEC_BASE:
            return self.uk_gec_base()
        if name == BIG:
            return self.big()
        if name == LITTLE:
            return self.little()
        return self.student(name)


def describe(model_dir: Path, text: str, task: str | None = None) -> None:
    """config.json "description" set to `text` (and "task" to `task`, when given) and the
    checksums recorded again (only config.json changes; no digest other models record
    covers these fields)."""
    fields = {"description": text, **({"task": task} if task else {})}
    config = json.loads((model_dir / "config.json").read_text())
    if any(config.get(k) != v for k, v in fields.items()):
        rehash(model_dir, fields)


def set_aside(*paths: Path) -> None:
    """Rename each existing file or directory to <name>.stale (replacing an older one):
    kept for inspection, never continued."""
    for path in paths:
        if not path.exists():
            continue
        stale = path.with_name(path.name + ".stale")
        if stale.is_dir():
            shutil.rmtree(stale)
        path.replace(stale)


def corpus_lines(split: str, lang: str, corpus: str = "multi30k"):
    import gzip

    with gzip.open(corpus_path(split, lang, corpus), "rt", encoding="utf-8") as f:
        yield from f


def train_count(corpus: str) -> int:
    return sum(1 for _ in corpus_lines("train", "en", corpus))


def held_out_count(corpus: str) -> int:
    """The last 500 training sources (a tenth of a small corpus) are held out; the rest trains.
    Not cached: the tests point FASTDEC_DATA elsewhere under the same corpus name."""
    return min(500, train_count(corpus) // 10)


def choose_checkpoint(run: Path) -> Path:
    """averaged.pt or best.pt of a finished run, whichever scored higher on val."""
    results = json.loads((run / "results.json").read_text())
    scored = [(results[name]["val"], run / f"{name}.pt") for name in ("averaged", "best") if name in results]
    if not scored:
        raise FileNotFoundError(f"{run / 'results.json'}: no scored checkpoint (averaged or best)")
    value, path = max(scored)
    log(f"{run.name}: {path.name} (val {value:.2f}; " + ", ".join(f"{p.stem} {v:.2f}" for v, p in scored) + ")")
    return path


NAMES = ["teacher-en-de", "distill-en-de", "en-de", "en-de-attn", "en-de-drafter", BIG, LITTLE, "uk-gec"]
# Built only when named: "all" runs on 2 CPU cores; uk-gec-base and the general chain's
# teacher and student are a GPU's work (--device cuda) or come --from a device call.
OPTIONAL = list(FROM_TARGETS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", choices=NAMES + OPTIONAL + ["all"])
    ap.add_argument("--runs", type=Path, default=Path("/work/runs"), help="training runs and intermediate data")
    ap.add_argument("--models", type=Path, default=None, help="where model directories are written (default: "
                    "the repository's models/; uk-gec-base: ~/.cache/pyfastdec/models)")
    ap.add_argument("--from", dest="from_", type=Path, default=None, metavar="PATH",
                    help="for the one target named of " + ", ".join(FROM_TARGETS) + ": what a device call "
                    "returned instead of training (distilling): a checkpoint .pt or an export.compact_ckpt "
                    "folder ($OUT/model of tools/device/train_uk_gec_base.sh, $OUT/teacher and $OUT/student of "
                    "train_general_student.sh); distill-en-de-general: its ckpt/train.de.gz")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device of the models trained over another's encoder "
                    "(en-de-drafter, en-de-little) and of " + ", ".join(DEVICE_RECIPES) + ", e.g. cuda; "
                    "the rest trains on the CPU")
    ap.add_argument("--minutes", action="append", default=[], metavar="RECIPE=MIN",
                    help="override a training budget, e.g. --minutes uk-gec=30")
    ap.add_argument("--prune-minutes", action="append", default=[], metavar="MODEL=LASSO,FINETUNE",
                    help="override a model's pruning stage minutes (PRUNE), e.g. en-de-general=1,1 for a dry run")
    ap.add_argument("--heads-steps", action="append", default=[], metavar="MODEL=STEPS",
                    help="override a model's proposal-head training steps (HEADS)")
    args = ap.parse_args(argv)
    minutes = dict(MINUTES)
    for item in args.minutes:
        recipe, _, value = item.partition("=")
        get_recipe(recipe)  # an unknown recipe is an error, not a silently ignored override
        minutes[recipe] = float(value)
    pruning, heads = dict(PRUNE), dict(HEADS)
    for item in args.prune_minutes:
        name, _, value = item.partition("=")
        lasso, _, finetune = value.partition(",")
        if name not in pruning or not all(x.replace(".", "", 1).isdigit() for x in (lasso, finetune)):
            ap.error(f"--prune-minutes {item}: expected MODEL=LASSO,FINETUNE (two numbers of minutes) with MODEL one of {', '.join(PRUNE)}")
        pruning[name] = (pruning[name][0], float(lasso), float(finetune))
    for item in args.heads_steps:
        name, _, value = item.partition("=")
        if name not in heads or not value.isdigit():
            ap.error(f"--heads-steps {item}: expected MODEL=STEPS (a whole number) with MODEL one of {', '.join(HEADS)}")
        heads[name] = (heads[name][0], int(value))
    takers = [name for name in args.names if name in FROM_TARGETS]
    if args.from_ is not None and len(takers) != 1:
        ap.error(f"--from: {len(takers)} of the targets named take it (expected one of {', '.join(FROM_TARGETS)})")
    if args.from_ is not None and args.from_.is_dir() and not (args.from_ / compact_ckpt.META).is_file():
        ap.error(f"--from {args.from_}: no {compact_ckpt.META} there; expected the model folder a device call "
                 "returned (export.compact_ckpt) or a checkpoint .pt")
    if args.from_ is not None and not args.from_.exists():
        ap.error(f"--from {args.from_}: no such file or folder; expected a checkpoint .pt or a compact_ckpt folder")
    builder = Builder(args.runs, args.models or REPO / "models", args.threads, minutes, device=args.device,
                      heads=heads, pruning=pruning,
                      from_={takers[0]: args.from_} if args.from_ is not None else None, gec_base_home=args.models)
    for name in (NAMES if "all" in args.names else args.names):
        log(f"{name} -> {builder.build(name)}")


if __name__ == "__main__":
    main()
