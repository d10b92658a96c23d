"""headscope reads tokenizers with the ``tokenizers`` library alone (:class:`headscope.core.tokenizer.Tokenizer`):
the same ids, texts, vocabulary and BOS as transformers 5's tokenizer of the same files
(``GPT2TokenizerFast`` for GPT-2, ``PreTrainedTokenizerFast`` for other families), on every
tokenizer flavour headscope meets — and transformers is not imported to get them."""

import json
import random
import subprocess
import sys

import pytest

from headscope.core.tokenizer import EOT, Tokenizer, gpt2_bpe_files, load_tokenizer
from headscope.testing.tokenizers import build_tokenizer


def _texts() -> list[str]:
    from headscope.report.inputs import load_inputs

    rng = random.Random(0)
    alphabet = list("abc XYZ 012 é ü 漢字 🙂 \u200b ' \" & ▁\n\t") + ["<|endoftext|>", "<s>", "</s>", "<bos>",
                                                                          "<script>", " red", "  "]
    out = [t.text for t in load_inputs().samples]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(600)]
    out += ["".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 12))) for _ in range(200)]
    return out


def _same(ours: Tokenizer, hf, ids_checked: int = 3000):
    for text in _texts():
        assert ours.encode(text) == hf.encode(text), text
    assert len(ours) == len(hf)
    assert ours.get_vocab() == hf.get_vocab()
    assert ours.bos_token_id == hf.bos_token_id
    ids = random.Random(1).sample(range(len(ours)), min(ids_checked, len(ours)))
    assert [ours.decode([i]) for i in ids] == [hf.decode([i]) for i in ids]
    assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert ours.decode(ids) == hf.decode(ids)


@pytest.fixture(scope="module")
def gpt2_dirs(tmp_path_factory):
    """GPT-2's real BPE as tokenizer.json (the hub's layout) and as vocab.json + merges.txt only."""
    from transformers import GPT2TokenizerFast

    vocab, merges = gpt2_bpe_files()
    tj = tmp_path_factory.mktemp("tj")
    GPT2TokenizerFast(vocab=str(vocab), merges=str(merges)).backend_tokenizer.save(str(tj / "tokenizer.json"))
    vm = tmp_path_factory.mktemp("vm")
    (vm / "vocab.json").write_bytes(vocab.read_bytes())
    (vm / "merges.txt").write_bytes(merges.read_bytes())
    return tj, vm


def test_gpt2_tokenizer_json_and_vocab_merges_match_transformers(gpt2_dirs):
    for d in gpt2_dirs:
        ours = load_tokenizer(d, "gpt2")
        assert isinstance(ours, Tokenizer) and ours.bos_token_id == 50256 == ours.get_vocab()[EOT]
        _same(ours, ours.transformers())
        assert ours.encode(" colour <|endoftext|>") == [9568, 220, 50256]


@pytest.mark.parametrize("flavour", ["gpt_neox", "opt", "llama", "llama2", "qwen2", "gemma2", "olmo2"])
def test_family_tokenizers_match_transformers(tmp_path, flavour):
    """Byte-level BPE and SentencePiece-style (llama2, gemma2: "▁" spaces, "<unk>") tokenizer.json files."""
    build_tokenizer(flavour, 700).save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(tmp_path, flavour)
    _same(ours, ours.transformers())


def test_a_files_template_truncation_and_padding_do_not_apply(tmp_path):
    """A tokenizer.json that prepends BOS in its post-processor, truncates and pads: headscope's ids
    are the model's tokens only, whole (it prepends BOS itself), as transformers' ``encode`` of the
    family tokenizer gives them."""
    from tokenizers import processors

    tok = build_tokenizer("llama", 700)
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[
        ("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    tok.enable_truncation(max_length=5)
    tok.enable_padding(length=9, pad_id=0, pad_token=tok.id_to_token(0))
    tok.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(tmp_path, "llama")
    text = "the cat sat on the mat and then it sat on the dog"
    assert len(ours.encode(text)) > 9 and ours.encode(text) == ours.transformers().encode(text)
    assert ours.encode(text, add_special_tokens=True)[0] == tok.token_to_id("<|begin_of_text|>")


def test_a_gpt2_tokenizer_json_without_its_added_token_still_splits_it(tmp_path, gpt2_dirs):
    """GPT2TokenizerFast adds <|endoftext|> as a special token where the file does not list it."""
    data = json.loads((gpt2_dirs[0] / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = []
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    ours = load_tokenizer(tmp_path, "gpt2")
    assert ours.encode("a<|endoftext|>b") == ours.transformers().encode("a<|endoftext|>b") == [64, 50256, 65]


def test_other_attributes_are_transformers_and_pickling_keeps_the_backend(gpt2_dirs):
    import pickle

    ours = load_tokenizer(gpt2_dirs[0], "gpt2")
    assert ours("a red")["input_ids"] == ours.encode("a red")                      # transformers' __call__
    assert ours.tokenize(" colour") == ["Ġcolour"]
    back = pickle.loads(pickle.dumps(ours))
    assert back.encode(" colour") == [9568] and back._hf is None


def test_loading_a_model_imports_no_transformers(tiny_hf_dir):
    code = ("import sys, headscope; m = headscope.load(sys.argv[1]); m.to_tokens(' a red'); m.bos; "
            "m.to_str_tokens([50256, 9568]); print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tiny_hf_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
