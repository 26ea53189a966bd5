import pytest

from trainer.tokenizer import CharTokenizer


def test_encode_decode_roundtrip_and_specials():
    t = CharTokenizer()
    assert (t.pad_id, t.bos_id, t.eos_id, t.vocab_size) == (0, 1, 2, 16)
    ids = t.encode("90817>")
    assert ids[0] == t.bos_id and len(ids) == 7
    assert t.decode(ids) == "<bos>90817>"
    assert t.decode(ids + [t.eos_id], skip_special=True) == "90817>"
    assert t.encode("12", add_bos=False) == [t.stoi["1"], t.stoi["2"]]


def test_unknown_character_is_a_clear_error():
    with pytest.raises(ValueError, match="not in the digit-task vocabulary"):
        CharTokenizer().encode("12a")


def test_hf_wrapper_matches_and_survives_save_load(tmp_path):
    from transformers import AutoTokenizer

    t = CharTokenizer()
    hf = t.to_hf()
    for text in ["0>", "31415926>", "12+3=15"]:
        assert hf(text)["input_ids"] == t.encode(text)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, len(hf)) == (0, 1, 2, 16)
    hf.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert again("5550>")["input_ids"] == t.encode("5550>")
    assert again.decode(t.encode("12>") + [2]) == "<bos>12><eos>"
    assert again.eos_token_id == 2
