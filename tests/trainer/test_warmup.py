import pytest
import torch

from trainer.envs import DigitSort
from trainer.inference import TorchBackend
from trainer.rollout import accuracy
from trainer.warmup import WarmupConfig, probe_accuracy, supervised_batch


def test_supervised_batch_scores_only_the_answer():
    from trainer.tokenizer import CharTokenizer

    tok = CharTokenizer().to_hf()
    env = DigitSort()
    ids, mask = supervised_batch(env, tok, [0])
    p = env.prompt(0)
    n_prompt = len(p.text) + 1  # bos + characters
    assert ids[0, :n_prompt].tolist() == tok(p.text)["input_ids"]
    assert tok.decode(ids[0, n_prompt:]) == p.answer + "<eos>"
    # mask[t] scores ids[t + 1]: exactly the answer digits and eos
    assert mask[0].tolist() == [0.0] * (n_prompt - 1) + [1.0] * (len(p.answer) + 1)


@pytest.mark.slow
def test_warmup_reaches_the_base_accuracy_range(warmed):
    model, tok, losses, calls = warmed
    cfg = WarmupConfig()
    taken = len(losses)  # stopped at a probe check, well before the cap
    assert cfg.first_check <= taken < cfg.steps and (taken - cfg.first_check) % cfg.check_every == 0
    assert [c[0] for c in calls] == list(range(1, taken + 1)) and all(c[1] == cfg.steps for c in calls)
    assert losses[-1] < losses[0] / 4
    assert probe_accuracy(model, tok, DigitSort(), cfg.probe_prompts) >= cfg.target
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False)
    acc = accuracy(DigitSort(), tok, backend, n=256)
    # RL needs some right and some wrong answers in most groups
    assert 0.25 <= acc <= 0.40, acc
    assert not model.training
    torch.testing.assert_close(model.lm_head.weight, model.model.embed_tokens.weight)


def test_warmup_stops_at_the_first_check_that_reaches_the_target(monkeypatch):
    from trainer import warmup as w
    from trainer.model import create_builtin_model

    probes = iter([0.1, 0.29, 0.31, 0.9])
    monkeypatch.setattr(w, "probe_accuracy", lambda *a: next(probes))
    model, tok = create_builtin_model(0)
    cfg = WarmupConfig(steps=20, batch_size=4, first_check=2, check_every=3, target=0.3)
    assert len(w.warmup(model, tok, DigitSort(), cfg)) == 8  # checks after steps 2, 5 and 8
    assert len(w.warmup(model, tok, DigitSort(), WarmupConfig(steps=3, batch_size=4, target=0.0))) == 3
    never = iter([0.0] * 10)
    monkeypatch.setattr(w, "probe_accuracy", lambda *a: next(never))
    assert len(w.warmup(model, tok, DigitSort(), WarmupConfig(steps=6, batch_size=4, first_check=2,
                                                              check_every=2))) == 6  # capped
