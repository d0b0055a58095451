"""Moses and SentencePiece tokenisation of real sentences: round trips, state, caching."""

import pickle
from pathlib import Path

import pytest

from alignmt.data import MosesTokenizer, SentencePieceTokenizer, Vocabulary, WhitespaceTokenizer
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


# --- word_ids: the word of the raw sentence (text.split()) each token comes from ----------


def test_whitespace_tokens_are_the_words():
    assert WhitespaceTokenizer().word_ids(" a  b\tc ") == [0, 1, 2]


def test_moses_tokens_map_to_the_words_they_were_split_from():
    moses = MosesTokenizer("en")
    text = 'A man, a "plan" & a canal.'
    # Words: A | man, | a | "plan" | & | a | canal.
    assert moses.word_ids(text) == [0, 1, 1, 2, 3, 3, 3, 4, 5, 6, 6]
    dashes = MosesTokenizer("en", aggressive_dash_splits=True)
    assert dashes.tokenize("a well-known dog") == ["a", "well", "@-@", "known", "dog"]
    assert dashes.word_ids("a well-known dog") == [0, 1, 1, 1, 2]
    assert moses.word_ids("a\x01b c") == [0, 1]  # Moses deletes the control character


def test_moses_word_ids_follow_the_sentence_not_word_by_word_tokenisation():
    # Rules that look across a space: an apostrophe after a space splits off ("'", "re"),
    # and a full stop stays on its word before a lower-case word. Tokenised word by word,
    # both come out differently; word_ids keeps the sentence's tokens.
    english = MosesTokenizer("en")
    assert english.tokenize("they 're here") == ["they", "'", "re", "here"]
    assert english.tokenize("'re") == ["'re"]
    assert english.word_ids("they 're here") == [0, 1, 1, 2]
    german = MosesTokenizer("de")
    assert german.tokenize("Er trägt. schneidet") == ["Er", "trägt.", "schneidet"]
    assert german.tokenize("trägt.") == ["trägt", "."]
    assert german.word_ids("Er trägt. schneidet") == [0, 1, 2]


@pytest.mark.parametrize("lang", ["en", "de", "fr"])
@pytest.mark.parametrize("dashes", [False, True])
def test_moses_word_ids_rebuild_every_word_of_real_sentences(lang, dashes):
    moses = MosesTokenizer(lang, aggressive_dash_splits=dashes)
    for sentence in sentences(lang, 1000):
        tokens, ids = moses.tokenize(sentence), moses.word_ids(sentence)
        assert len(ids) == len(tokens)
        for k, word in enumerate(sentence.split()):
            pieces = ["-" if t == "@-@" else t for t, i in zip(tokens, ids, strict=True) if i == k]
            assert "".join(pieces) == word, (sentence, word)


def test_sentencepiece_pieces_starting_with_the_marker_start_words(sentencepiece):
    tokenizer, _ = sentencepiece
    for lang in ("de", "en"):
        for sentence in sentences(lang, 300):
            pieces, ids = tokenizer.tokenize(sentence), tokenizer.word_ids(sentence)
            assert len(ids) == len(pieces)
            starts = [p.startswith("▁") for p in pieces]
            assert ids == [sum(starts[: k + 1]) - 1 for k in range(len(pieces))], sentence
            assert sorted(set(ids)) == list(range(len(sentence.split())))


def test_sentencepiece_word_ids_survive_normalisation(sentencepiece):
    tokenizer, _ = sentencepiece
    # NFKC turns "¨" into a space and a combining diaeresis: an extra "▁" inside word 1.
    text = "ein x¨y Hund"
    assert sum(p.startswith("▁") for p in tokenizer.tokenize(text)) > len(text.split())
    ids = tokenizer.word_ids(text)
    assert ids[0] == 0 and ids[-1] == 2 and set(ids[1:-1]) == {1}
    # A zero-width space is a word to str.split() but normalised away: word 1 has no pieces.
    text = "ein \u200b Hund"
    assert len(text.split()) == 3
    assert set(tokenizer.word_ids(text)) == {0, 2}
