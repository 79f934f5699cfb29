"""The model families export.build_models builds from one teacher each, and what a device
call returned to them (--from).

A Chain is teacher -> distilled train targets -> students; its corpus is its teacher
recipe's "corpus" (Builder.corpus), so every stage after the teacher (distillation,
shortlist pairs, proposal-head sources, held-out counts) reads the same files: Multi30k
for en-de, the general-domain set of issue 32 ($FASTDEC_GENERAL_EN_DE) for en-de-general.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import compact_ckpt
from .data import read_lines

# The general train sources are distilled greedily, not with beam 5 as en-de's: beam 5
# costs ~3.5x as long on the CPU (bench/README.md, "General En-De: distillation and the
# student"), and greedy is what a device call distils on the GPU
# (tools/device/train_general_student.sh).
GENERAL_BEAM = 1


@dataclass(frozen=True)
class Chain:
    """One teacher -> distillation -> students family. Its corpus is its teacher recipe's
    "corpus" (Builder.corpus), so every stage after the teacher reads the same files."""
    teacher: str         # model name of the teacher (RECIPE_OF)
    distill: str         # build target of the distilled train targets
    distill_dir: str     # runs/<distill_dir>/train.de
    beam: int            # distillation beam (1: greedy)
    models: tuple        # the models built from it


EN_DE = Chain("teacher-en-de", "distill-en-de", "distill", 5, ("en-de", "en-de-attn", "en-de-drafter", "en-de-big",
                                                                "en-de-little"))
GENERAL = Chain("teacher-en-de-general", "distill-en-de-general", "distill-general", GENERAL_BEAM, ("en-de-general",))
CHAINS = (EN_DE, GENERAL)
# The targets that take --from: what was trained elsewhere (a device call) instead.
FROM_TARGETS = ("uk-gec-base", GENERAL.teacher, GENERAL.distill, *GENERAL.models)


def checkpoint_identity(path: Path) -> dict:
    """What identifies a checkpoint file's content cheaply: path, size, modification time."""
    st = path.stat()
    return {"checkpoint": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def keep_returned(runs: Path, target: str, source: Path | None) -> Path | None:
    """runs/returned/<target>.pt (a checkpoint: from a .pt, or unpacked from an
    export.compact_ckpt folder) or .de (distilled targets, from text or .gz), copied from
    `source` when given and changed since last copied; None when there is none. Kept, so
    that later commands without --from find it; rewritten only when the source changed,
    since a new teacher file means distilling again."""
    kept = runs / "returned" / (target + (".de" if target.startswith("distill") else ".pt"))
    if source is not None:
        if kept.suffix == ".de" and source.is_dir():
            raise ValueError(f"--from {source}: a folder (expected {target}'s distilled targets: a text or .gz "
                             "file, e.g. train_general_student.sh's train.de.gz)")
        stamp = kept.with_name(kept.name + ".from.json")
        identity = checkpoint_identity(source / compact_ckpt.META if source.is_dir() else source)
        if not kept.exists() or not stamp.exists() or json.loads(stamp.read_text()) != identity:
            kept.parent.mkdir(parents=True, exist_ok=True)
            staging = kept.with_name(kept.name + ".tmp")
            if source.is_dir():
                import torch

                packed = compact_ckpt.unpack(source)
                print(f"{source}: {packed['recipe']} step {packed['step']} ({packed['source']}) -> {kept}", flush=True)
                torch.save(packed, staging)
            elif kept.suffix == ".de":
                staging.write_text("".join(line + "\n" for line in read_lines(source)), encoding="utf-8")
            else:
                shutil.copyfile(source, staging)
            staging.replace(kept)
            stamp.write_text(json.dumps(identity))
    return kept if kept.exists() else None
