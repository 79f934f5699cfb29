"""export.warm_start: which teacher tensors a student gets, and export.train --init."""
import json

import pytest
import torch

from export.modeling import ModelConfig, Seq2Seq
from export.train import main
from export.warm_start import init_from_teacher, spread

from test_export_train import corpus  # noqa: F401  (fixture)


@pytest.mark.parametrize("student,teacher,expected", [
    (2, 3, [0, 2]), (1, 3, [2]), (4, 6, [0, 2, 3, 5]), (6, 6, [0, 1, 2, 3, 4, 5]), (0, 3, []),
])
def test_spread_keeps_first_and_last(student, teacher, expected):
    assert spread(student, teacher) == expected


def make(dec_layers, decoder_self="attention", arch="transformer", enc_layers=3, block_size=None):
    cfg = ModelConfig.create(32, 2, 64, enc_layers, dec_layers, arch=arch, vocab_size=50, norm="pre",
                             decoder_self=decoder_self, block_size=block_size)
    return Seq2Seq(cfg)


def test_student_gets_spread_layers_and_ssru_stays_random():
    torch.manual_seed(0)
    teacher = make(3)
    student = make(2, decoder_self="ssru", enc_layers=2)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    copied, kept = init_from_teacher(student, teacher.state_dict())
    t, s = teacher.state_dict(), student.state_dict()
    assert torch.equal(s["embed.weight"], t["embed.weight"])
    assert torch.equal(s["encoder.layers.1.ffn.fc1.weight"], t["encoder.layers.2.ffn.fc1.weight"])
    assert torch.equal(s["decoder.layers.1.cross_attn.q.weight"], t["decoder.layers.2.cross_attn.q.weight"])
    assert torch.equal(s["decoder.layers.0.ln_ffn.bias"], t["decoder.layers.0.ln_ffn.bias"])
    ssru = [k for k in s if ".ssru." in k]
    assert ssru and set(ssru) <= set(kept)
    assert all(torch.equal(s[k], before[k]) for k in kept)
    assert set(copied) | set(kept) == set(s) and not set(copied) & set(kept)


def test_shape_mismatch_is_kept_not_copied():
    teacher = make(1)
    cfg = ModelConfig.create(32, 2, 128, 3, 1, arch="transformer", vocab_size=50, norm="pre",
                             decoder_self="attention")  # wider FFN than the teacher
    student = Seq2Seq(cfg)
    copied, kept = init_from_teacher(student, teacher.state_dict())
    assert "encoder.layers.0.ffn.fc1.weight" in kept and "encoder.layers.0.self_attn.q.weight" in copied


def test_train_init_shares_vocabulary_and_starts_from_teacher(corpus):  # noqa: F811
    teacher_out, student_out = corpus / "teacher", corpus / "student"
    main(["--recipe", "test-tiny", "--out", str(teacher_out), "--threads", "1", "--max-steps", "6"])
    main(["--recipe", "test-tiny-ssru", "--out", str(student_out), "--threads", "1", "--max-steps", "3",
          "--init", str(teacher_out / "averaged.pt")])
    assert (student_out / "spm.model").read_bytes() == (teacher_out / "spm.model").read_bytes()
    assert json.loads((student_out / "results.json").read_text())["steps"] == 3
