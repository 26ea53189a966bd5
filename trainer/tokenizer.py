"""Character-level tokenizer for the built-in digit-sorting task.

One token per character keeps the task honest (the model must learn to sort, not to look up
multi-digit tokens) and the vocabulary tiny. `CharTokenizer` is plain Python; `to_hf()` wraps the
same vocabulary as a `transformers.PreTrainedTokenizerFast`, so the built-in model directory is an
ordinary Hugging Face checkpoint that `save_pretrained` / `from_pretrained` handle offline.
"""

from __future__ import annotations

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
# Specials first (ids 0, 1, 2), then digits, the separator '>', and spare symbols for new tasks.
# Padded to 16 entries so the embedding matrix has a friendly shape.
SYMBOLS = list("0123456789") + [">", "+", "=", " ", "-", "?"][: 16 - 3 - 10]
VOCAB = [PAD, BOS, EOS] + SYMBOLS


class CharTokenizer:
    """Maps each character to one id; special tokens are never produced by `encode`."""

    def __init__(self) -> None:
        self.itos = list(VOCAB)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self.vocab_size = len(self.itos)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Ids for `text`, prefixed with bos (the model always starts from bos)."""
        try:
            ids = [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the digit-task vocabulary") from None
        return ([self.bos_id] if add_bos else []) + ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        """Text for `ids`; specials decode to their names unless skipped."""
        return "".join(self.itos[i] for i in ids if not (skip_special and i < 3))

    def to_hf(self):
        """The same vocabulary as a PreTrainedTokenizerFast (bos added by the post-processor)."""
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.WordLevel(vocab=dict(self.stoi), unk_token=PAD))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.decoder = decoders.Fuse()
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", special_tokens=[(BOS, self.bos_id)])
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=PAD,
            padding_side="left", model_max_length=32)
