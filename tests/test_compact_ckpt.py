"""export.compact_ckpt: what a device call can return (<= 16 MiB files) and what the int8
export gets from it: the same int8 weights as from the checkpoint itself."""
import torch

from export import compact_ckpt
from export.recipes import get_recipe
from export.train import build_model
from export.writer import quantize_embedding, quantize_weight, quantized_linears


def test_pack_unpack_gives_the_int8_weights_of_the_original(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = build_model(dict(get_recipe("test-tiny"), model=dict(get_recipe("test-tiny")["model"], d_model=64)), 200)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["encoder.layers.0.ffn.fc1.weight"][3] = 0.0  # an all-zero row keeps a usable scale
    ckpt = tmp_path / "averaged.pt"
    torch.save({"model": state, "config": model.cfg.to_json(), "recipe": "test-tiny", "step": 7, "epoch": 2,
                "spm": b"spm bytes"}, ckpt)
    monkeypatch.setattr(compact_ckpt, "SHARD_BYTES", 20_000)  # several shards at this size
    paths = compact_ckpt.pack(ckpt, tmp_path / "packed")
    assert len(paths) > 3 and all(p.stat().st_size <= 20_000 for p in paths if p.suffix == ".pt")
    back = compact_ckpt.unpack(tmp_path / "packed")
    assert back["spm"] == b"spm bytes" and (back["recipe"], back["step"], back["epoch"]) == ("test-tiny", 7, 2)
    assert back["config"] == model.cfg.to_json() and set(back["model"]) == set(state)
    for name in quantized_linears(model):  # export.writer's int8 rule on both
        qa, sa = quantize_weight(state[f"{name}.weight"])
        qb, sb = quantize_weight(back["model"][f"{name}.weight"])
        assert torch.equal(qa, qb), name
        assert torch.allclose(sa, sb, rtol=1e-6), name
    qa, _ = quantize_embedding(state["embed.weight"])
    qb, _ = quantize_embedding(back["model"]["embed.weight"])
    assert (qa.int() - qb.int()).abs().max() <= 1 and (qa != qb).float().mean() < 0.001
    for name, value in state.items():
        if value.dim() != 2:
            assert torch.equal(back["model"][name], value.float()), name


def test_build_models_from_refuses_what_is_not_a_checkpoint(tmp_path, capsys):
    from export import build_models

    (tmp_path / "empty").mkdir()
    for path, says in ((tmp_path / "missing.pt", "no such file or folder"), (tmp_path / "empty", "no meta.json")):
        try:
            build_models.main(["uk-gec-base", "--from", str(path), "--runs", str(tmp_path / "runs")])
        except SystemExit as err:
            assert err.code == 2
        else:
            raise AssertionError("accepted")
        msg = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"--from {path}" in msg and says in msg and "expected" in msg


def test_newest_writes_the_newest_epoch_model_without_optimizer_state(tmp_path, capsys):
    # numeric, not lexical, order: epoch10 is newer than epoch9
    for epoch in (2, 9, 10):
        torch.save({"model": {"w": torch.full((2,), float(epoch))}, "config": {}, "step": 100 * epoch,
                    "epoch": epoch, "recipe": "test-tiny", "spm": b"spm", "optimizer": {"big": torch.zeros(3)}},
                   tmp_path / f"epoch{epoch}.pt")
    (tmp_path / "epochs.pt").write_bytes(b"not an epoch checkpoint")  # a name that only starts alike
    assert compact_ckpt.main(["newest", str(tmp_path)]) == 0
    assert "last.pt from epoch10.pt, step 1000" in capsys.readouterr().out
    last = torch.load(tmp_path / "last.pt", weights_only=False)
    assert set(last) == set(compact_ckpt.MODEL_KEYS) and last["step"] == 1000
    assert torch.equal(last["model"]["w"], torch.full((2,), 10.0))


def test_newest_names_the_folder_without_checkpoints(tmp_path):
    import pytest
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no epoch<N>.pt"):
        compact_ckpt.newest(tmp_path)
    torch.save({"model": {}, "step": 1}, tmp_path / "epoch1.pt")
    with pytest.raises(KeyError, match="epoch1.pt: no config, epoch, recipe, spm"):
        compact_ckpt.newest(tmp_path)
