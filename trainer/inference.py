"""Inference backends: batched sampling that records what validators and GRPO need.

Each `Completion` carries, per generated token:
  - `logprobs`: float32 log-probability of the sampled token under the *raw* model distribution
    (log_softmax of the logits at temperature 1, whatever temperature was used to sample). GRPO's
    importance ratio and the validators' logprob check both compare against this.
  - `hidden`: the output of the final norm (`model.model.norm`) at the position whose logits
    produced that token, i.e. positions len(prompt)-1 ... len(prompt)+n-2 of prompt+completion,
    cast to bf16 (TOPLOC proofs are built from bf16; fp32 yields a null proof).

Sampling is reproducible: each completion has its own seed (see `sample_seed`), which drives a
private CPU `torch.Generator`; step t draws `vocab_size` uniforms u and picks
argmax(logits / temperature - log(-log u)) (Gumbel-max, an exact sample of softmax(logits / T)).
The noise depends only on the seed, so anyone can replay it against their own logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from gossip.assignment import sample_seed  # noqa: F401  (re-exported: seeds come from here)


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    prompt_ids: list[int]
    token_ids: list[int]  # generated ids, ending with eos when `finished`
    logprobs: torch.Tensor  # float32 [n]: raw (temperature-1) log-probs of token_ids
    hidden: torch.Tensor | None  # bf16 [n, hidden_size]: final-norm outputs, or None if not captured
    finished: bool  # True when eos was generated within max_new_tokens
    seed: int


class Backend(Protocol):
    def generate(self, prompts_token_ids: list[list[int]], samples_per_prompt: int,
                 max_new_tokens: int, temperature: float, seeds: list[int]) -> list[Completion]:
        """`samples_per_prompt` completions per prompt, prompt-major order; one seed per completion.
        temperature 0 means greedy (seeds are then unused)."""
        ...


def final_norm(model) -> torch.nn.Module:
    """The final norm of a Llama-family Hugging Face model (`model.model.norm`), hooked for proofs."""
    norm = getattr(getattr(model, "model", None), "norm", None)
    if not isinstance(norm, torch.nn.Module):
        raise TypeError(f"{type(model).__name__} has no model.model.norm; only Llama-family "
                        "causal LMs (Llama, SmolLM2, Qwen2, Mistral) are supported")
    return norm


def gumbel_noise(generator: torch.Generator, vocab_size: int) -> torch.Tensor:
    """Next Gumbel(0, 1) vector from a per-sample generator (CPU, float32)."""
    u = torch.rand(vocab_size, generator=generator, dtype=torch.float32)
    return -torch.log(-torch.log(u.clamp_min(1e-20)))


class TorchBackend:
    """Plain-torch batched generation with a KV cache, on CPU or CUDA.

    Prompts are left-padded into one batch (explicit position ids keep RoPE positions right), so
    a batch of 256 samples costs one prefill plus one cached forward per generated token.
    """

    def __init__(self, model, eos_id: int, pad_id: int | None = None, capture_hidden: bool = True,
                 max_batch: int = 256):
        self.model = model
        self.eos_id = eos_id
        self.pad_id = eos_id if pad_id is None else pad_id
        self.capture_hidden = capture_hidden
        self.max_batch = max_batch

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts_token_ids: list[list[int]], samples_per_prompt: int,
                 max_new_tokens: int, temperature: float, seeds: list[int]) -> list[Completion]:
        rows = [list(p) for p in prompts_token_ids for _ in range(samples_per_prompt)]
        if temperature > 0 and len(seeds) != len(rows):
            raise ValueError(f"need one seed per completion: {len(rows)} rows, {len(seeds)} seeds")
        seeds = list(seeds) if temperature > 0 else [0] * len(rows)
        out: list[Completion] = []
        for start in range(0, len(rows), self.max_batch):
            chunk = slice(start, start + self.max_batch)
            out += self._generate_batch(rows[chunk], seeds[chunk], max_new_tokens, temperature)
        return out

    @torch.no_grad()
    def _generate_batch(self, rows, seeds, max_new_tokens, temperature) -> list[Completion]:
        from transformers import DynamicCache

        model, device = self.model, self.device
        b, width = len(rows), max(len(r) for r in rows)
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)

        captured: list[torch.Tensor] = []
        hook = None
        if self.capture_hidden:
            hook = final_norm(model).register_forward_hook(
                lambda _m, _i, o: captured.append(o[:, -1].to(torch.bfloat16)))
        gens = [torch.Generator().manual_seed(s) for s in seeds] if temperature > 0 else []
        tokens = torch.full((b, max_new_tokens), self.pad_id, dtype=torch.long)
        logprobs = torch.zeros((b, max_new_tokens), dtype=torch.float32)
        done = torch.zeros(b, dtype=torch.bool)
        lengths = torch.zeros(b, dtype=torch.long)
        try:
            cache = DynamicCache(config=model.config)
            logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                           past_key_values=cache, use_cache=True).logits[:, -1].float()
            for t in range(max_new_tokens):
                logp = torch.log_softmax(logits, dim=-1).cpu()
                if temperature > 0:
                    noise = torch.stack([gumbel_noise(g, logp.shape[-1]) for g in gens])
                    nxt = (logits.cpu() / temperature + noise).argmax(-1)
                else:
                    nxt = logits.cpu().argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
                tokens[:, t] = nxt
                logprobs[:, t] = logp.gather(1, nxt[:, None])[:, 0]
                lengths += (~done).long()
                done |= nxt == self.eos_id
                if bool(done.all()) or t == max_new_tokens - 1:
                    break
                mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=device)], 1)
                positions = positions[:, -1:] + 1
                logits = model(input_ids=nxt[:, None].to(device), attention_mask=mask,
                               position_ids=positions, past_key_values=cache,
                               use_cache=True).logits[:, -1].float()
        finally:
            if hook is not None:
                hook.remove()
        hidden = torch.stack(captured, 1).cpu() if captured else None  # [b, steps, H]
        out = []
        for i in range(b):
            n = int(lengths[i])
            ids = tokens[i, :n].tolist()
            out.append(Completion(
                prompt_ids=rows[i], token_ids=ids, logprobs=logprobs[i, :n].clone(),
                hidden=hidden[i, :n].clone() if hidden is not None else None,
                finished=bool(ids) and ids[-1] == self.eos_id, seed=seeds[i]))
        return out


@torch.no_grad()
def prefill(model, prompt_ids: list[int], token_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Recompute (raw logprobs float32 [n], final-norm hidden bf16 [n, H]) of `token_ids` after
    `prompt_ids` in one forward pass: what a validator runs to check a Completion."""
    captured: list[torch.Tensor] = []
    hook = final_norm(model).register_forward_hook(lambda _m, _i, o: captured.append(o))
    device = next(model.parameters()).device
    try:
        ids = torch.tensor([list(prompt_ids) + list(token_ids)], device=device)
        logits = model(input_ids=ids).logits[0].float()
    finally:
        hook.remove()
    p, n = len(prompt_ids), len(token_ids)
    logp = torch.log_softmax(logits[p - 1:p - 1 + n], -1)
    chosen = logp.gather(1, torch.tensor(token_ids, device=device)[:, None])[:, 0]
    return chosen.cpu(), captured[0][0, p - 1:p - 1 + n].to(torch.bfloat16).cpu()
