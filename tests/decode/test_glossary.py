"""Glossaries (decode/glossary.py) and the lexically constrained beam search (decode/constrained.py)."""

import itertools

import pytest
import torch

from tests.helpers.common import random_ids
from tests.helpers.decode_models import constrained_beam_search, random_model
from vaswani.decode.glossary import Glossary, GlossaryError, missing
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import PerSource, search_ids
from vaswani.decode.terms import advance


def _holds(tokens: list[int], term: list[int]) -> int:
    """How many times `term` occurs in `tokens`, not overlapping."""
    count, i = 0, 0
    while i + len(term) <= len(tokens):
        if tokens[i : i + len(term)] == term:
            count, i = count + 1, i + len(term)
        else:
            i += 1
    return count


def test_a_glossary_file_is_read_and_each_bad_line_is_named(tmp_path):
    good = tmp_path / "terms.tsv"
    good.write_text("# product names\nHund\tcanine\n\nNew York\tNYC\nhund\tcanine\n", encoding="utf-8")
    assert Glossary.read(good).pairs == (("Hund", "canine"), ("New York", "NYC"))  # the same pair twice: once
    cases = {
        "Hund canine\n": "line 1: no tab",
        "Hund\tcanine\nKatze\t \n": "line 2: the target term is empty",
        "\tcanine\n": "line 1: the source term is empty",
        "Hund\tcanine\nHUND\tdog\n": "line 2: 'HUND' is already in the glossary",
        "# nothing\n\n": "no terms",
    }
    for text, expected in cases.items():
        path = tmp_path / "bad.tsv"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(GlossaryError, match=expected) as error:
            Glossary.read(path)
        assert "\n" not in str(error.value) and str(path) in str(error.value)
    path.write_bytes(b"Hund\tcan\xffine\n")
    with pytest.raises(GlossaryError, match="not UTF-8"):
        Glossary.read(path)
    with pytest.raises(GlossaryError, match="pair 2: the target term is empty"):
        Glossary.of([("Hund", "canine"), ("Katze", "")])


def test_terms_match_whole_words_case_insensitively_longest_and_leftmost_first():
    glossary = Glossary.of({"Hund": "canine", "New York": "NYC", "York": "Y", "Straße": "road", "C++": "cpp"})
    sentence = "Der hund, die Hunde und der HUND in New   York, York, straße, Hundehütte, C++."
    assert glossary.targets(sentence) == ["canine", "canine", "NYC", "Y", "road", "cpp"]
    assert [sentence[a:b] for a, b, _ in glossary.matches(sentence)][:3] == ["hund", "HUND", "New   York"]
    assert glossary.targets("Hunde und Hundehütten.") == []
    assert missing(["canine", "canine", "NYC"], "a canine and NYC") == ["canine"]
    assert hash(glossary) == hash(Glossary.of(dict(glossary.pairs)))  # a request's batch key


def test_advance_follows_a_term_token_by_token_and_starts_again_when_broken():
    terms = [[7, 8, 9], [5]]
    met, midway = advance(terms, (False, False), None, 7)
    assert (met, midway) == ((False, False), (0, 1))
    assert advance(terms, met, midway, 4) == ((False, False), None)  # broken off
    assert advance(terms, met, midway, 7) == ((False, False), (0, 1))  # broken off, started again
    met, midway = advance(terms, *advance(terms, met, midway, 8), 9)
    assert (met, midway) == ((True, False), None)
    assert advance(terms, met, midway, 5) == ((True, True), None)


@pytest.mark.parametrize("beam", [1, 4, 5])
def test_every_term_is_in_every_output_as_often_as_asked(beam):
    model = random_model(40, seed=3)
    src = random_ids([6, 4, 7, 5, 3, 6], vocab=40)
    constraints = [[[11, 12]], [[20], [20]], [[30, 31, 32], [9]], [[5]], [[14, 15], [16]], [[33]]]
    request = DecodeRequest.of(beam_size=beam, n_best=min(beam, 2), max_len_a=1.0, max_len_b=8)
    results = constrained_beam_search(model, src, constraints, request)
    for terms, hyps in zip(constraints, results, strict=True):
        assert 1 <= len(hyps) <= min(beam, 2)  # n-best: only outputs with every term
        for hyp in hyps:
            for term in terms:
                assert _holds(hyp.tokens, term) >= terms.count(term), (hyp.tokens, terms)
            # ended by EOS (counted in the length), or cut at the length limit
            penalties = [((5 + len(hyp.tokens) + eos) / 6) ** 0.6 for eos in (1, 0)]
            assert hyp.score in [pytest.approx(hyp.log_prob / p) for p in penalties]
            assert sum(hyp.token_log_probs) == pytest.approx(hyp.log_prob, abs=1e-4)
        assert hyps[0].score >= hyps[-1].score


def test_constrained_search_is_the_same_cached_uncached_and_batched_or_alone():
    model = random_model(40, seed=4)
    src = random_ids([6, 4, 7, 5], vocab=40)
    constraints = [[[11, 12]], [[20]], [[30, 31], [9]], [[5]]]
    request = DecodeRequest.of(beam_size=4, n_best=2, max_len_b=8)
    batched = constrained_beam_search(model, src, constraints, request)
    uncached = constrained_beam_search(model, src, constraints, request, cache=False)
    for i, n in enumerate([6, 4, 7, 5]):
        alone = constrained_beam_search(model, src[i : i + 1, :n], constraints[i : i + 1], request)[0]
        for other in (uncached[i], alone):
            assert [h.tokens for h in other] == [h.tokens for h in batched[i]]
            assert [h.score for h in other] == pytest.approx([h.score for h in batched[i]], abs=1e-4)


def test_sentences_without_terms_are_searched_exactly_as_without_a_glossary():
    model = random_model(40, seed=5)
    sources = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15], [16, 17, 18]]
    request = DecodeRequest.of(beam_size=4, max_len_b=8, batch_size=4)
    plain = search_ids(model, sources, request)
    mixed = search_ids(model, sources, request, asked=PerSource([[], [[21, 22]], [], [[30]]]))
    for i in (0, 2):  # the same outputs; scores to rounding (a batch of other sentences beside them)
        assert [h.tokens for h in mixed[i]] == [h.tokens for h in plain[i]]
        assert [h.score for h in mixed[i]] == pytest.approx([h.score for h in plain[i]], abs=1e-5)
    assert _holds(mixed[1][0].tokens, [21, 22]) and _holds(mixed[3][0].tokens, [30])
    assert mixed[1] != plain[1]
    assert search_ids(model, sources, request, asked=PerSource([[], [], [], []])) == plain


def test_a_term_that_cannot_fit_the_length_limit_leaves_the_best_partial_output():
    model = random_model(40, seed=6)
    src = random_ids([3], vocab=40)
    request = DecodeRequest.of(beam_size=4, max_len_a=0.0, max_len_b=3)
    [hyps] = constrained_beam_search(model, src, [[[11, 12], [13, 14]]], request)
    assert len(hyps) == 1 and len(hyps[0].tokens) == 3  # cut at the limit, not dropped
    assert _holds(hyps[0].tokens, [11, 12]) + _holds(hyps[0].tokens, [13, 14]) == 1  # as many terms as fit


def test_the_translator_applies_a_glossary_and_reports_terms_left_out(tmp_path):
    from tests.helpers.common import write_tiny_model_directory
    from vaswani.translate.translator import Translator

    (tmp_path / "model").mkdir()
    translator = Translator.load(write_tiny_model_directory(tmp_path / "model", max_len_b=12), "cpu")
    glossary = Glossary.of({"Hund": "canine", "Straße": "roadway"})
    sentences = ["Ein Hund läuft über die Straße.", "Zwei Katzen schlafen.", "Der Hund."]
    plain = translator.translate_with_details(sentences)
    found = translator.translate_with_details(sentences, glossary=glossary)
    assert found[1].text == plain[1].text and found[1].missing_terms == ()
    assert "canine" in found[0].text and "roadway" in found[0].text and found[0].missing_terms == ()
    assert "canine" in found[2].text
    assert "missing_terms" in found[0].to_dict() and "missing_terms" not in plain[0].to_dict()
    warnings = []
    tight = translator.translate_with_details(
        ["Der Hund und die Straße."],
        glossary=glossary,
        max_len_a=0.0,
        max_len_b=2,
        warn=lambda i, m: warnings.append(m),
    )
    assert tight[0].missing_terms and "not in the translation" in warnings[0]
    with torch.no_grad():
        assert translator.translate(sentences, glossary=glossary) == [t.text for t in found]


def test_glossary_from_the_command_line_and_the_http_api(tmp_path, capsys):
    from fastapi.testclient import TestClient

    from tests.helpers.common import write_tiny_model_directory
    from vaswani import cli
    from vaswani.serve.app import Settings, create_app
    from vaswani.translate.translator import Translator

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    write_tiny_model_directory(model_dir, max_len_b=12)
    terms, source, out = tmp_path / "terms.tsv", tmp_path / "in.de", tmp_path / "out.en"
    terms.write_text("Hund\tcanine\nStraße\troadway\n", encoding="utf-8")
    lines = ["Ein Hund läuft über die Straße.", "", "Zwei Katzen schlafen.", "Der Hund."]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli.main(["translate", str(model_dir), "-i", str(source), "-o", str(out), "--glossary", str(terms)]) == 0
    written = out.read_text(encoding="utf-8").splitlines()
    translator = Translator.load(model_dir, "cpu")
    assert len(written) == 4 and written[1] == "" and "canine" in written[0] and "roadway" in written[0]
    assert written[2] == translator.translate([lines[2]])[0]  # no term: as without a glossary
    capsys.readouterr()
    bad = tmp_path / "bad.tsv"
    bad.write_text("Hund canine\n", encoding="utf-8")
    assert cli.main(["translate", str(model_dir), "-i", str(source), "--glossary", str(bad)]) == 2
    assert "line 1: no tab" in capsys.readouterr().err
    tight = ["translate", str(model_dir), "-i", str(source), "--glossary", str(terms), "--max-len-a", "0"]
    assert cli.main([*tight, "--max-len-b", "1"]) == 0
    assert "line 1: glossary term(s) 'canine', 'roadway' not in the translation" in capsys.readouterr().err

    with TestClient(create_app(translator, model_dir, Settings(max_glossary=2))) as client:
        body = {"text": ["Ein Hund läuft über die Straße. Zwei Katzen schlafen."], "glossary": [["Hund", "canine"]]}
        reply = client.post("/v1/translate", json=body).json()["translations"][0]
        assert "canine" in reply["text"] and reply["missing_terms"] == []
        assert [s["missing_terms"] for s in reply["sentences"]] == [[], []]
        plain = client.post("/v1/translate", json={"text": body["text"]}).json()["translations"][0]
        assert "missing_terms" not in plain and plain["sentences"][1]["text"] == reply["sentences"][1]["text"]
        for glossary, message in (
            ([["Hund", ""]], "the target term is empty"),
            ([["Hund", "a"], ["hund", "b"]], "already in the glossary"),
            ([["a", "b"]] * 3, "3 pairs, more than the 2 allowed"),
            ([["Hund"]], "glossary"),
        ):
            response = client.post("/v1/translate", json={"text": ["Ein Hund."], "glossary": glossary})
            assert response.status_code == 422 and message in response.json()["error"], response.json()
        assert client.get("/v1/model").json()["limits"]["max_glossary"] == 2


def test_constrained_search_keeps_the_repetition_rules():
    model = random_model(40, seed=7)
    src = random_ids([5, 6], vocab=40)
    request = DecodeRequest.of(beam_size=4, max_len_b=10, no_repeat_ngram=2)
    found = constrained_beam_search(model, src, [[[11, 12]], [[13]]], request)
    assert len(found) == 2
    for hyps in found:
        tokens = hyps[0].tokens
        assert len(set(itertools.pairwise(tokens))) == len(tokens) - 1  # no bigram twice


def test_unicode_case_folding_a_bom_and_crlf_never_break_a_glossary(tmp_path):
    glossary = Glossary.of({"istanbul": "Istanbul", "Straße": "street", "Kelvin": "K", "ıspanak": "spinach"})
    sentence = "İSTANBUL, STRASSE, ſtraße und \u212aelvin; ispanak ist nicht ıspanak."
    assert glossary.targets(sentence) == ["Istanbul", "street", "street", "K", "spinach"]  # no KeyError on İ
    path = tmp_path / "terms.tsv"
    path.write_bytes("\ufeffHund\thound\r\nMann\tgentleman\r\n".encode())
    read = Glossary.read(path)
    assert read.pairs == (("Hund", "hound"), ("Mann", "gentleman"))  # the BOM is not part of the first term
    assert read.targets("Der Hund und der Mann.") == ["hound", "gentleman"]


def test_missing_counts_whole_words_never_substrings():
    assert missing(["hound"], "A dog is hounding a dog.") == ["hound"]
    assert missing(["cat"], "a category") == ["cat"]
    assert missing(["hound", "hound"], "A hound's bowl and a Hound.") == []
    assert missing(["New York"], "in new  york") == []


def test_a_term_is_never_followed_by_a_piece_that_continues_its_word():
    model = random_model(40, seed=7)
    src = random_ids([6, 5, 7, 4], vocab=40)
    continues = [i for i in range(4, 40) if i % 4]  # most words continue the word before them
    mask = torch.zeros(40, dtype=torch.bool)
    mask[continues] = True
    request = DecodeRequest.of(beam_size=4, max_len_a=1.0, max_len_b=8)
    terms = [[[12]], [[20, 21]], [[8]], [[16]]]
    glued = 0
    for rule in (None, mask):
        for wanted, hyps in zip(
            terms, constrained_beam_search(model, src, terms, request, continues_word=rule), strict=True
        ):
            term, tokens = wanted[0], hyps[0].tokens
            ends = [i + len(term) for i in range(len(tokens)) if tokens[i : i + len(term)] == term]
            assert ends, (tokens, term)
            after = [tokens[e] for e in ends if e < len(tokens)]
            if rule is None:
                glued += any(t in continues for t in after)
            else:
                assert not any(t in continues for t in after), (tokens, term)
    assert glued  # without the rule the term is glued to a continuation: the test can fail


@pytest.fixture(scope="module")
def copying(tmp_path_factory):
    """The tiny model directory's model trained for a few seconds to copy its source (one tokenizer for both
    sides): outputs that end, and an alignment that holds, as a trained translator's do. Trained on the short lines
    of the training file: on those of the validation file it learned them by heart instead, and put one of them out
    for any sentence (an AMD EPYC with avx512_bf16; another CPU's rounding hid it): checked here, so that a fixture
    that does not copy fails as such, not as the tests that rely on it."""
    import torch.nn.functional as F

    from tests.helpers.common import MULTI30K, write_tiny_model_directory
    from vaswani.config import Config
    from vaswani.data.corpus import read_lines
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.nn import Transformer
    from vaswani.train import checkpoint as ckpt
    from vaswani.translate.translator import Translator

    directory = tmp_path_factory.mktemp("copying")
    write_tiny_model_directory(directory, max_len_a=1.5, max_len_b=5)
    c = Config.load(directory / "config.yaml").model
    torch.manual_seed(0)
    model = Transformer(c).train()
    lines = read_lines(MULTI30K / "raw/train.de.gz")
    lines = [x for x in Tokenizer.load(directory).encode_src(lines) if 3 <= len(x) <= 12]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(600):
        batch = [lines[(step * 32 + i) % len(lines)] for i in range(32)]
        longest = max(map(len, batch)) + 1
        src = torch.tensor([[*x, c.eos_id] + [c.pad_id] * (longest - len(x) - 1) for x in batch])
        tgt_in = torch.tensor([[c.bos_id, *x] + [c.pad_id] * (longest - len(x) - 1) for x in batch])
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), src.flatten(), ignore_index=c.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ckpt.save_weights(ckpt.weights_of(model.eval()), directory / ckpt.WEIGHTS)
    translator = Translator.load(directory, "cpu")
    sentences = ["Ein Hund läuft über die Straße.", "Der Mann und die Frau."]
    assert translator.translate(sentences) == sentences, "the fixture did not learn to copy"
    return translator


@pytest.mark.slow  # trains a model to copy (~40 s); the placement's logic: test_the_translator_applies_a_glossary...
def test_a_term_takes_the_place_of_the_model_s_word_nothing_added_nothing_after_the_end(copying):
    from vaswani.decode.glossary import occurrences

    translator = copying
    sentences = ["Ein Hund läuft über die Straße.", "Der Mann und die Frau.", "Ein Hund und ein Hund.", "Zwei Katzen."]
    glossary = Glossary.of({"Hund": "hound", "Mann": "gentleman", "Straße": "roadway"})
    plain = translator.translate_with_details(sentences, alignment=True)
    found = translator.translate_with_details(sentences, glossary=glossary)
    old = search_ids(  # the terms placed by the search alone, as before: beside the model's word or glued
        translator.model,
        translator.encode_sources(sentences[:3]),
        translator.request(),
        asked=PerSource([translator.terms.term_ids(glossary.targets(s)) for s in sentences[:3]]),
    )
    assert found[3].text == plain[3].text  # no term: the plain translation
    moved = placed = 0
    for source, before, after, searched in zip(sentences[:3], plain[:3], found[:3], old, strict=True):
        assert after.missing_terms == ()
        words, new = before.text.split(), after.text.split()
        asked = glossary.targets(source)
        for term in set(asked):
            assert occurrences(term, after.text) >= asked.count(term), (after.text, term)  # as whole words
        # each term where the model's aligned word stood: as many words as before, the others unchanged, in order
        # (a sentence whose terms share an aligned word is searched with its terms as constraints instead)
        if len(new) != len(words):
            continue
        placed += 1
        changed = [i for i, (a, b) in enumerate(zip(words, new, strict=True)) if a != b]
        aligned = set()
        for start, end, _ in glossary.matches(source):
            spans = before.alignment.source
            aligned |= {t for w, (a, b) in enumerate(spans) if a < end and b > start for t in before.alignment.links[w]}
        assert changed and set(changed) <= aligned, (before.text, after.text, aligned)
        searched_text = translator.tokenizer.decode_tgt([searched[0].tokens])[0]
        moved += searched_text.split() != new
    assert placed >= 2 and moved  # the search alone did otherwise: the test can fail


@pytest.mark.slow  # the trained copier above
def test_where_the_alignment_gives_a_term_two_words_or_none_the_word_the_term_makes_likely_gives_way(copying):
    # "an orange hat looking at" aligned "Hut" with "hat looking": both words gave way to the term, "looking" was lost;
    # a term aligned with no word was searched again with constraints, which appended it ("... the camera. Lumix.").
    # Now the word the source term makes likeliest (erasure, _Salience.gains) gives way: within the aligned words, or
    # where none is aligned, the one the term makes e times likelier at least; else the constrained search.
    import dataclasses

    from vaswani.translate.term_placement import _Salience

    translator = copying
    sentence = "Ein Hund läuft über die Straße."
    [plain] = translator.translate_with_details([sentence], alignment=True)
    [src_ids] = translator.encode_sources([sentence])
    start, tokens, words = sentence.index("Hund"), plain.candidates[0].tokens, plain.text.split()
    source_word = next(w for w, (a, b) in enumerate(plain.alignment.source) if a == start)
    [hound] = translator.terms.term_ids(["hound"])

    class Likeliest(_Salience):
        def __init__(self, alignment, word: int, gain: float) -> None:
            super().__init__(translator.terms, src_ids, tokens, alignment, False)
            self.word, self.gain = word, gain

        def gains(self, start: int, end: int) -> list[float]:
            return [self.gain if w == self.word else 0.1 for w in range(len(words))]

    for word in (1, 2):
        for links, gain, placed in (((1, 2), 0.5, True), ((), 1.5, True), ((), 0.5, False)):
            linked = list(plain.alignment.links)
            linked[source_word] = links
            alignment = dataclasses.replace(plain.alignment, links=tuple(linked))
            edited = translator.terms._edited(
                [(start, start + 4, hound)], tokens, alignment, Likeliest(alignment, word, gain)
            )
            if not placed:
                assert edited is None  # searched with the term as a constraint
                continue
            text = translator.tokenizer.decode_tgt([edited])[0].split()
            assert text == [*words[:word], "hound", *words[word + 1 :]], (links, word, text)
    # the gains themselves: the copier's word for "Hund" is the one its erasure makes least likely
    gains = _Salience(translator.terms, src_ids, tokens, plain.alignment, False).gains(start, start + 4)
    assert (
        len(gains) == len(words) and max(range(len(words)), key=gains.__getitem__) in plain.alignment.links[source_word]
    )


def test_a_translation_that_reads_as_no_words_gives_a_term_no_salient_word(model_dir):
    # An untrained model's pieces may decode to an empty text (no target words): the term is then searched with
    # constraints, not an IndexError (found by tests/export's glossary through CTranslate2).
    import dataclasses

    from vaswani.translate.term_placement import _Salience
    from vaswani.translate.translator import Translator

    translator = Translator.load(model_dir, "cpu")
    sentence = "Ein Hund läuft."
    [plain] = translator.translate_with_details([sentence], alignment=True)
    [src_ids] = translator.encode_sources([sentence])
    empty = dataclasses.replace(plain.alignment, target=(), links=tuple(() for _ in plain.alignment.source))
    salient = _Salience(translator.terms, src_ids, plain.candidates[0].tokens or [5, 6], empty, False)
    assert salient(4, 8, None, 1) is None
