import json

import pytest
import torch

from trainer.model import ModelLoadError, create_builtin_model, load_model, save_model


def test_builtin_model_size_and_seeded_init(builtin):
    model, tok = builtin
    n = sum(p.numel() for p in model.parameters())
    assert 2_000_000 <= n <= 4_000_000
    assert type(model).__name__ == "LlamaForCausalLM"
    again, _ = create_builtin_model(0)
    other, _ = create_builtin_model(1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)
    assert tok.eos_token_id == model.config.eos_token_id == 2


def test_create_does_not_disturb_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    create_builtin_model(5)
    assert torch.equal(torch.rand(3), expected)


def test_save_load_roundtrip_is_exact_and_atomic(builtin, tmp_path):
    model, tok = builtin
    target = tmp_path / "m"
    save_model(model, tok, target)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in target.iterdir()}
    loaded, tok2 = load_model(target)
    ids = torch.tensor([tok("31415>")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert tok2("31415>")["input_ids"] == tok("31415>")["input_ids"]
    # saving again replaces the directory and leaves no temporary siblings behind
    other, _ = create_builtin_model(1)
    save_model(other, tok, target)
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    reloaded, _ = load_model(target)
    assert torch.equal(reloaded.lm_head.weight, other.lm_head.weight)


def test_load_errors_say_what_to_do(builtin, tmp_path):
    model, tok = builtin
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "missing")
    good = save_model(model, tok, tmp_path / "good")

    def broken(name, mutate):
        d = tmp_path / name
        save_model(model, tok, d)
        mutate(d)
        return d

    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(broken("noconfig", lambda d: (d / "config.json").unlink()))
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_model(broken("badjson", lambda d: (d / "config.json").write_text("{oops")))
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_model(broken("noweights", lambda d: (d / "model.safetensors").unlink()))
    with pytest.raises(ModelLoadError, match="not a valid safetensors file"):
        load_model(broken("truncated", lambda d: (d / "model.safetensors").write_bytes(
            (good / "model.safetensors").read_bytes()[:100])))
    with pytest.raises(ModelLoadError, match="no tokenizer files"):
        load_model(broken("notok", lambda d: [(d / f).unlink() for f in
                                              ("tokenizer.json", "tokenizer_config.json")]))
    cfg = json.loads((good / "config.json").read_text())
    cfg["model_type"] = "no-such-architecture"
    with pytest.raises(ModelLoadError, match="could not load"):
        load_model(broken("badtype", lambda d: (d / "config.json").write_text(json.dumps(cfg))))


def test_a_tokenizer_without_a_pad_token_pads_with_its_end_token(builtin, tmp_path):
    """SmolLM2's GGUF tokenizer has no pad token under some transformers versions; batches still pad."""
    import copy

    from trainer.grpo import make_batch

    model, tok = builtin
    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    _, loaded = load_model(save_model(model, no_pad, tmp_path / "m"))
    assert loaded.pad_token_id == loaded.eos_token_id == 2
    batch = make_batch([[5, 6]], [[7]], [torch.zeros(1)], torch.ones(1), loaded.pad_token_id)
    assert batch.input_ids.shape[0] == 1
