"""Moses and SentencePiece tokenisation of real sentences: round trips, state, caching."""

import pickle
from pathlib import Path

import pytest

from alignmt.data import MosesTokenizer, SentencePieceTokenizer, Vocabulary
from alignmt.data.corpus import read_lines
from alignmt.special_tokens import UNK_ID

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)


def sentences(lang: str, n: int = 2000) -> list[str]:
    return read_lines(SHARED_DATA / "multi30k" / f"train.{lang}.gz")[:n]


def squeeze(text: str) -> str:
    """The raw files have stray double spaces; neither tokeniser keeps them."""
    return " ".join(text.split())


@pytest.mark.parametrize("lang", ["en", "de", "fr"])
def test_moses_detokenises_what_it_tokenised(lang):
    moses = MosesTokenizer(lang)
    lines = sentences(lang)
    same = sum(moses.detokenize(moses.tokenize(s)) == squeeze(s) for s in lines)
    assert same >= 0.99 * len(lines)


def test_moses_splits_punctuation_and_keeps_text_unescaped():
    moses = MosesTokenizer("en")
    tokens = moses.tokenize('A man, a "plan" & a canal.')
    assert tokens == ["A", "man", ",", "a", '"', "plan", '"', "&", "a", "canal", "."]
    assert moses.detokenize(tokens) == 'A man, a "plan" & a canal.'
    assert MosesTokenizer("fr").tokenize("l'homme") == ["l'", "homme"]


def test_a_word_vocabulary_keeps_the_k_most_frequent_words():
    moses = MosesTokenizer("en")
    tokenized = [moses.tokenize(s) for s in sentences("en")]
    vocab = Vocabulary.build(tokenized, max_size=500)
    assert len(vocab) == 4 + 500
    ids = [i for sentence in tokenized for i in vocab.encode(sentence)]
    assert 0 < ids.count(UNK_ID) < 0.2 * len(ids)  # the shortlist covers most running words


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def sentencepiece(request, tmp_path_factory):
    tokenizer = SentencePieceTokenizer(request.param, vocab_size=1000)
    model_file = tmp_path_factory.mktemp("sp") / "joint.model"
    tokenizer.fit(sentences("de") + sentences("en"), model_file)
    return tokenizer, model_file


def test_sentencepiece_round_trips_real_sentences(sentencepiece):
    tokenizer, _ = sentencepiece
    for lang in ("de", "en"):
        for sentence in sentences(lang, 300):
            pieces = tokenizer.tokenize(sentence)
            assert tokenizer.detokenize(pieces) == squeeze(sentence)
    pieces = tokenizer.tokenize("Ein Hund läuft über die Wiese.")
    assert any(p.startswith("▁") for p in pieces) and len(pieces) < 20


def test_sentencepiece_state_is_plain_bytes_and_restores_the_same_model(sentencepiece):
    tokenizer, _ = sentencepiece
    state = tokenizer.state_dict()
    assert isinstance(state["model"], bytes)
    restored = SentencePieceTokenizer()
    restored.load_state_dict(state)
    copy = pickle.loads(pickle.dumps(tokenizer))  # DataLoader workers, map(num_proc>1)
    sentence = sentences("de", 1)[0]
    assert restored.tokenize(sentence) == copy.tokenize(sentence) == tokenizer.tokenize(sentence)
    assert restored.fingerprint == tokenizer.fingerprint


def test_sentencepiece_loads_an_existing_model_file_instead_of_training(sentencepiece):
    tokenizer, model_file = sentencepiece
    again = SentencePieceTokenizer(tokenizer.options["model_type"], vocab_size=1000)
    again.fit(iter(()), model_file)  # no sentences: it must not train
    assert again.fingerprint == tokenizer.fingerprint


def test_an_untrained_sentencepiece_says_how_to_get_a_model():
    with pytest.raises(RuntimeError, match=r"not trained yet.*checkpoint"):
        SentencePieceTokenizer().tokenize("hello")
