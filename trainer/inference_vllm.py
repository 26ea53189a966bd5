"""vLLM inference backend (GPU), same `Backend.generate` contract as `TorchBackend`.

- Sampling: one vLLM request per completion with `SamplingParams(seed=...)`, so each sample has
  its own reproducible generator (vLLM's, not our Gumbel stream: vLLM rollouts are checked by
  logprob, not by exact replay). Logprobs are vLLM's default `raw_logprobs`: log_softmax of the
  model's logits before temperature or any processor, the same convention as `TorchBackend`.
- Hidden states: vLLM does not return final-norm activations, so after generation we run one
  prefill per completion over prompt + completion[:-1] with a forward hook on `model.model.norm`
  (vLLM's RMSNorm returns (normed, residual); we keep `normed`). This is the activation a validator
  recomputes, and vLLM and torch activations from the final norm verify against each other.
  Prefix caching is off and the token budget covers a whole sequence, so each prefill is exactly
  one forward whose first rows are that sequence.
- The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so `apply_model` callables and
  the hook buffer need no pickling across processes. vllm is imported lazily: this module imports
  on machines without vLLM or a GPU.
"""

from __future__ import annotations

import os

import torch

from trainer.inference import Completion


class VllmBackend:
    def __init__(self, model_dir: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.5,
                 max_model_len: int | None = None, capture_hidden: bool = True, seed: int = 0):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from vllm import LLM

        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        self.max_model_len = max_model_len or int(config.max_position_embeddings)
        self.eos_id = _eos_id(config)
        self.capture_hidden = capture_hidden
        self.llm = LLM(
            model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
            enforce_eager=True,  # forward hooks do not fire inside captured CUDA graphs
            enable_prefix_caching=False,  # every prefill must compute every position
            max_model_len=self.max_model_len,
            max_num_batched_tokens=max(8192, self.max_model_len),
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode="raw_logprobs",
        )
        self._buffer: list[torch.Tensor] = []
        buffer = self._buffer

        def hook(_module, _inputs, output):
            normed = output[0] if isinstance(output, tuple) else output
            buffer.append(normed.detach().to(torch.bfloat16).cpu())

        def install(model):
            model.model.norm.register_forward_hook(hook)
            return True

        if capture_hidden:
            self.llm.apply_model(install)

    def generate(self, prompts_token_ids: list[list[int]], samples_per_prompt: int,
                 max_new_tokens: int, temperature: float, seeds: list[int]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        rows = [list(p) for p in prompts_token_ids for _ in range(samples_per_prompt)]
        if temperature > 0 and len(seeds) != len(rows):
            raise ValueError(f"need one seed per completion: {len(rows)} rows, {len(seeds)} seeds")
        seeds = list(seeds) if temperature > 0 else [0] * len(rows)
        params = [SamplingParams(n=1, temperature=temperature, seed=s if temperature > 0 else None,
                                 max_tokens=max_new_tokens, logprobs=0,
                                 stop_token_ids=[self.eos_id], ignore_eos=False,
                                 skip_special_tokens=False, detokenize=False)
                  for s in seeds]
        self._buffer.clear()
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows], params,
                                    use_tqdm=False)
        self._buffer.clear()  # activations of the generation pass are not kept (see docstring)
        completions = []
        for row, seed, out in zip(rows, seeds, outputs):
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            lps = [step[tok].logprob for step, tok in zip(sample.logprobs, ids)]
            completions.append(Completion(
                prompt_ids=row, token_ids=ids, logprobs=torch.tensor(lps, dtype=torch.float32),
                hidden=self._prefill_hidden(row, ids) if self.capture_hidden else None,
                finished=bool(ids) and ids[-1] == self.eos_id, seed=seed))
        return completions

    def _prefill_hidden(self, prompt: list[int], tokens: list[int]) -> torch.Tensor:
        """Final-norm outputs at positions len(prompt)-1 ... len(prompt)+len(tokens)-2."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not tokens:
            return torch.zeros((0, 0), dtype=torch.bfloat16)
        seq = prompt + tokens[:-1]
        self._buffer.clear()
        self.llm.generate([TokensPrompt(prompt_token_ids=seq)],
                          SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
                          use_tqdm=False)
        if not self._buffer or self._buffer[0].shape[0] < len(seq):
            raise RuntimeError("vLLM prefill did not run as one forward over the whole sequence")
        hidden = self._buffer[0][:len(seq)]
        self._buffer.clear()
        return hidden[len(prompt) - 1:].clone()

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Swap in a new policy version (Hugging Face parameter names) without reloading vLLM."""
        items = list(state_dict.items())
        self.llm.apply_model(lambda model: model.load_weights(iter(items)))
        self.llm.reset_prefix_cache()


def _eos_id(config) -> int:
    eos = config.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0]
    if eos is None:
        raise ValueError("model config has no eos_token_id; generation could never stop")
    return int(eos)
