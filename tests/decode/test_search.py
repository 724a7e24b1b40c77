import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.common import random_ids, tiny_config
from tests.helpers.decode_models import random_model
from vaswani import Transformer
from vaswani.decode import search, steps
from vaswani.decode.hypothesis import Finished
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, greedy, length_penalty, sample


@torch.no_grad()
def _log_probs(model, src_row, tokens):
    """Teacher-forced log-probabilities of each next token (PAD and BOS banned, as in the search)."""
    c = model.config
    logits = model(src_row[None], torch.tensor([[c.bos_id, *tokens]]))[0].float()  # (T, V)
    logits[:, [c.pad_id, c.bos_id]] = float("-inf")
    return F.log_softmax(logits, -1)


def _greedy_reference(model, src, max_len):
    """Independent greedy decoder: re-runs the whole model on the prefix at every step."""
    c = model.config
    out = []
    for row in src:
        prefix = []
        for _ in range(max_len):
            token = int(_log_probs(model, row[row != c.pad_id], prefix)[-1].argmax())
            if token == c.eos_id:
                break
            prefix.append(token)
        out.append(prefix)
    return out


LENGTHS = [5, 2, 7, 4, 1, 6, 8, 3, 5, 7, 2, 6]


@pytest.mark.slow
def test_greedy_equals_a_decoder_without_cache_and_outputs_end_at_different_lengths(model):
    src = random_ids(LENGTHS)
    request = DecodeRequest.of(max_len_a=0.0, max_len_b=9)
    found = [h.tokens for h in greedy(model, src, request)]
    assert found == _greedy_reference(model, src, 9)
    assert found == [h.tokens for h in greedy(model, src, request, cache=False)]
    assert len({len(t) for t in found}) >= 3  # EOS handling is exercised


@pytest.mark.parametrize("trained", [True, False])
def test_beam_cached_equals_uncached_token_for_token(model, trained):
    model = model if trained else random_model(12, seed=4)  # random: beams reorder at almost every step
    src = random_ids(LENGTHS, vocab=model.config.src_vocab_size)
    request = DecodeRequest.of(beam_size=4, length_penalty=0.6, max_len_a=1.0, max_len_b=5, n_best=4)
    cached, uncached = beam_search(model, src, request), beam_search(model, src, request, cache=False)
    assert [[h.tokens for h in hyps] for hyps in cached] == [[h.tokens for h in hyps] for hyps in uncached]
    for a, b in zip(cached, uncached, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_beam_size_one_with_early_stopping_is_greedy(model):
    src = random_ids(LENGTHS)
    request = DecodeRequest.of(beam_size=1, max_len_a=1.0, max_len_b=4, early_stopping=True)
    beam = beam_search(model, src, request)
    assert [hyps[0].tokens for hyps in beam] == [h.tokens for h in greedy(model, src, request)]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_sentence_alone_equals_the_same_sentence_in_a_mixed_batch(beam_size, model):
    src = random_ids(LENGTHS)
    request = DecodeRequest.of(beam_size=beam_size, max_len_a=1.0, max_len_b=6, n_best=beam_size)
    batched = beam_search(model, src, request)
    for i, n in enumerate(LENGTHS):
        alone = beam_search(model, src[i : i + 1, :n], request)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)
    limits = DecodeRequest.of(max_len_a=1.0, max_len_b=6)
    greedy_batched = greedy(model, src, limits)
    for i, n in enumerate(LENGTHS):
        assert greedy(model, src[i : i + 1, :n], limits)[0].tokens == greedy_batched[i].tokens


def _all_outputs(words, eos, limit):
    """Every output the search can produce: up to limit-1 words then EOS, or limit words (cut at the limit)."""
    for n in range(limit):
        for seq in itertools.product(words, repeat=n):
            yield list(seq), True
    for seq in itertools.product(words, repeat=limit):
        yield list(seq), False


@pytest.mark.parametrize("early_stopping", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_finds_the_best_hypothesis_under_its_own_score(alpha, early_stopping):
    model = random_model(vocab=6, seed=5)  # tokens: pad, bos, eos, unk, 4, 5
    c, limit = model.config, 4
    src = random_ids([3], vocab=6)
    best, best_score = None, float("-inf")
    for tokens, eos in _all_outputs([3, 4, 5], c.eos_id, limit):
        lp = _log_probs(model, src[0], tokens)
        total = sum(float(lp[t, w]) for t, w in enumerate(tokens)) + (float(lp[len(tokens), c.eos_id]) if eos else 0)
        score = total / length_penalty(len(tokens) + eos, alpha)
        if score > best_score:
            best, best_score = tokens, score
    options = dict(length_penalty=alpha, max_len_a=0.0, max_len_b=limit, early_stopping=early_stopping)
    found = beam_search(model, src, DecodeRequest.of(beam_size=128, **options))[0][0]
    assert found.tokens == best
    assert found.score == pytest.approx(best_score, abs=1e-5)
    small = beam_search(model, src, DecodeRequest.of(beam_size=2, **options))[0][0]
    assert small.score <= best_score + 1e-6


@pytest.mark.parametrize("n_best", [1, 3])
@pytest.mark.parametrize("alpha", [1.0, 3.0])  # large: long hypotheses can still win late
def test_the_stopping_rule_ends_a_sentence_only_when_going_on_could_not_change_its_result(
    model, alpha, n_best, monkeypatch
):
    """The default rule gives exactly what searching every sentence to its length limit gives, with
    less work; early stopping (k finished) does less still, and on some sentences scores lower."""
    torch.manual_seed(0)
    src = random_ids(LENGTHS * 3)
    request = DecodeRequest.of(beam_size=4, length_penalty=alpha, max_len_a=1.0, max_len_b=10, n_best=n_best)
    rows = []  # decoder rows fed at each step: the work done
    original = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda x, *a, **kw: rows.append(len(x)) or original(x, *a, **kw))

    def run(**more):
        rows.clear()
        results = beam_search(model, src, request.replace(**more))
        return [[h.tokens for h in hyps] for hyps in results], [[h.score for h in hyps] for hyps in results], sum(rows)

    exact, exact_scores, exact_work = run()
    _, early_scores, early_work = run(early_stopping=True)
    with monkeypatch.context() as m:
        m.setattr(Finished, "cannot_improve", lambda *args: False)
        to_the_limit, limit_scores, limit_work = run()
    assert exact == to_the_limit
    for a, b in zip(exact_scores, limit_scores, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert early_work < exact_work < limit_work
    gains = [a[0] - b[0] for a, b in zip(exact_scores, early_scores, strict=True)]
    assert min(gains) > -1e-4
    if alpha == 3.0:  # long hypotheses that finish after k short ones win
        assert max(gains) > 1e-3


def test_n_best_is_sorted_distinct_and_scored_consistently(model):
    src = random_ids([4, 6])
    request = DecodeRequest.of(beam_size=5, length_penalty=0.6, max_len_a=1.0, max_len_b=3, n_best=5)
    found = beam_search(model, src, request)
    assert len(found) == 2
    for hyps in found:
        assert len(hyps) == 5
        assert len({tuple(h.tokens) for h in hyps}) == 5
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens) + 1, 0.6), rel=1e-6) or (
                h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens), 0.6), rel=1e-6)
            )


def test_encoder_runs_once_per_sentence_and_finished_sentences_leave_the_batch(model):
    src = random_ids(LENGTHS)
    encoded, rows = [], []
    model.encoder.register_forward_hook(lambda m, args, out: encoded.append(args[0].size(0)))
    original = model.decode_step

    def counting(tokens, *args, **kwargs):
        rows.append(tokens.size(0))
        return original(tokens, *args, **kwargs)

    model.decode_step = counting
    beam_search(model, src, DecodeRequest.of(beam_size=4, max_len_a=1.0, max_len_b=6))
    assert encoded == [len(LENGTHS)]  # once, for 6 sentences, not 24 beams
    # the first step runs one row per sentence (its k hypotheses are identical), then k rows per sentence
    assert rows[0] == len(LENGTHS) and rows[1] == 4 * len(LENGTHS) and rows[-1] < rows[1]
    assert all(r % 4 == 0 for r in rows[1:]) and rows[1:] == sorted(rows[1:], reverse=True)
    rows.clear()
    greedy(model, src, DecodeRequest.of(max_len_a=1.0, max_len_b=6))
    assert rows[0] == len(LENGTHS) and rows[-1] < rows[0]


def test_sampling_is_seeded_and_follows_the_model_distribution(model):
    src = random_ids([4])

    def run(seed, **options):
        generator = torch.Generator().manual_seed(seed)
        request = DecodeRequest.of(max_len_a=0, max_len_b=5, **options)
        return [h.tokens for h in sample(model, src.expand(8, -1), request, generator=generator)]

    assert run(1) == run(1) and run(1) != run(2)
    greedy_tokens = greedy(model, src, DecodeRequest.of(max_len_a=0.0, max_len_b=5))[0].tokens
    for options in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)):
        assert run(7, **options) == [greedy_tokens] * 8
    many = src.expand(4000, -1)
    first = [
        h.tokens[0] if h.tokens else 2
        for h in sample(model, many, DecodeRequest.of(max_len_a=0.0, max_len_b=1), torch.Generator().manual_seed(0))
    ]
    probs = _log_probs(model, src[0], []).exp()[0]
    counts = torch.bincount(torch.tensor(first), minlength=probs.numel()).float() / len(first)
    assert (counts - probs).abs().max() < 0.03
    top3 = set(probs.topk(3).indices.tolist())
    generator = torch.Generator().manual_seed(0)
    restricted = sample(model, many[:500], DecodeRequest.of(top_k=3, max_len_a=0, max_len_b=1), generator=generator)
    assert {h.tokens[0] if h.tokens else 2 for h in restricted} <= top3


def test_greedy_stops_at_the_length_limit_a_times_source_length_plus_b():
    model = Transformer(tiny_config()).eval()  # untrained: it never says EOS here, so the limit ends each output
    src = random_ids([3, 6])
    for a, b, limits in ((1.0, 2, [5, 8]), (0.0, 2, [2, 2]), (2.0, 0, [6, 12])):
        out = [h.tokens for h in greedy(model, src, DecodeRequest.of(max_len_a=a, max_len_b=b))]
        assert out == [_greedy_reference(model, src[i : i + 1], n)[0] for i, n in enumerate(limits)]
        assert [len(tokens) for tokens in out] == limits


def test_min_len_forbids_early_eos(model):
    src = random_ids(LENGTHS)
    beams = beam_search(model, src, DecodeRequest.of(beam_size=3, max_len_a=0.0, max_len_b=7, min_len=7))
    assert [len(hyps[0].tokens) for hyps in beams] == [7] * len(LENGTHS)
    at_7 = greedy(model, src, DecodeRequest.of(max_len_a=0.0, max_len_b=7, min_len=7))
    assert [len(h.tokens) for h in at_7] == [7] * len(LENGTHS)
    at_least_4 = greedy(model, src, DecodeRequest.of(max_len_a=0.0, max_len_b=9, min_len=4))
    assert len(at_least_4) == len(LENGTHS) and all(len(h.tokens) >= 4 for h in at_least_4)


@pytest.mark.parametrize("after_softmax", [False, True])
def test_the_scores_written_in_place_are_log_softmax_exactly(after_softmax):
    torch.manual_seed(0)
    for shape in [(128, 58101), (3, 7), (1, 1000)]:
        logits = torch.randn(shape) * 4
        banned = [0, 1]
        expected = logits.clone()
        if after_softmax:
            expected = F.log_softmax(expected, -1)
            expected[:, banned] = float("-inf")
        else:
            expected[:, banned] = float("-inf")
            expected = F.log_softmax(expected, -1)
        written = logits.clone()
        scores = search.banned_log_probs(written, torch.tensor(banned), after_softmax)
        assert torch.equal(scores, expected)
        assert scores.data_ptr() == written.data_ptr()  # no second (rows, V) tensor on a CPU
    strided = torch.randn(8, 6).t()  # not contiguous: a new tensor, the same values
    assert torch.equal(search.log_softmax_(strided), F.log_softmax(strided, -1))


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"min_len": 3},
        {"ban_after_softmax": True},
        {"no_repeat_ngram": 2},
        {"repetition_penalty": 1.5, "no_repeat_ngram": 1},
    ],
)
def test_greedy_without_scores_picks_the_same_words_without_the_softmax(model, monkeypatch, settings):
    src = random_ids(LENGTHS)
    request = DecodeRequest.of(max_len_a=1.0, max_len_b=4, **settings)
    scored = greedy(model, src, request)
    assert len({len(h.tokens) for h in scored}) >= 3  # outputs end at different steps: rows leave the batch

    def no_softmax(*args, **kwargs):
        raise AssertionError("the log-softmax ran, though no score was asked for")

    monkeypatch.setattr(steps, "banned_log_probs", no_softmax)
    bare = greedy(model, src, request.replace(scores=False))
    assert [h.tokens for h in bare] == [h.tokens for h in scored]
    assert all(math.isnan(h.log_prob) and math.isnan(h.score) and h.confidence is None for h in bare)
    with pytest.raises(AssertionError, match="log-softmax ran"):  # a sample's draw still needs probabilities
        sample(model, src, DecodeRequest.of(sampling=True, scores=False, max_len_a=1.0, max_len_b=4))


def test_an_untrained_model_s_near_ties_pick_alike_with_and_without_scores():
    model = random_model(12, seed=4)  # random logits: every step's best word is narrowly ahead
    src = random_ids(LENGTHS, vocab=12)
    request = DecodeRequest.of(max_len_a=2.0, max_len_b=6)
    bare = greedy(model, src, request.replace(scores=False))
    assert [h.tokens for h in bare] == [h.tokens for h in greedy(model, src, request)]
