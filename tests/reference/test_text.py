"""Text in, text out: a checkpoint folder's tokenizer.json (the 'hf' extra) around greedy decoding,
with a word-level tokenizer built here by the tokenizers library (nothing downloaded)."""

import json

import pytest

from pytest_dispatch.reference import ReferenceModel, random_weights

from ._helpers import ODD
from .test_checkpoint import checkpoint

tokenizers = pytest.importorskip("tokenizers", reason="the 'hf' extra (tokenizers) is not installed")

WORDS = [f"w{i}" for i in range(ODD.vocab_size)]  # token id i is the word "w<i>"
PROMPT = "w3 w17 w250 w42"


def word_tokenizer():
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return tokenizer


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = checkpoint(tmp_path_factory.mktemp("text") / "odd", ODD, random_weights(ODD, seed=4))
    word_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def test_generate_text_is_the_greedy_tokens_as_words(gpu_device, folder):
    model = ReferenceModel.from_pretrained(gpu_device, folder, max_seq_len=16)
    tokens = model.generate([3, 17, 250, 42], 6)
    assert model.generate_text(PROMPT, max_new_tokens=6) == " ".join(WORDS[t] for t in tokens)
    assert model.generate_text(PROMPT, max_new_tokens=6, tokens_per_submit=3) == " ".join(WORDS[t] for t in tokens)


def test_generate_text_stops_before_the_end_of_sequence_token(gpu_device, folder, tmp_path):
    model = ReferenceModel.from_pretrained(gpu_device, folder, max_seq_len=16)
    tokens = model.generate([3, 17, 250, 42], 6)
    eos = tokens[2]
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [ODD.vocab_size - 1, eos]}))
    try:
        stopped = ReferenceModel.from_pretrained(gpu_device, folder, max_seq_len=16)
        assert stopped.eos_token_ids == (ODD.vocab_size - 1, eos)
        expected = tokens[:tokens.index(eos)]  # eos may come earlier than step 2
        assert stopped.generate_text(PROMPT, max_new_tokens=6) == " ".join(WORDS[t] for t in expected)
    finally:
        (folder / "generation_config.json").unlink()


def test_without_a_tokenizer_generate_text_says_what_to_do(gpu_device, folder):
    model = ReferenceModel.from_pretrained(gpu_device, folder, tokenizer=False, max_seq_len=16)
    with pytest.raises(ValueError, match="generate_text needs a tokenizer: load the model with "
                                         "ReferenceModel.from_pretrained from a folder with tokenizer.json"):
        model.generate_text(PROMPT)
