"""Continuous batching (decode/continuous.py): sentences that join a running batch mid-way and leave it when done get
the hypotheses search_ids gives each alone."""

import copy
import random

import pytest
import torch

from tests.helpers.common import random_ids
from vaswani.decode.continuous import ContinuousSearch, supports
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import PerSource, search_ids
from vaswani.nn.cpu_linear.int8 import int8_available, quantize_int8

LENGTHS = [7, 1, 5, 8, 2, 6, 3, 8, 4, 1, 7, 5]


def _sources(seed: int = 0) -> list[list[int]]:
    torch.manual_seed(seed)
    src = random_ids(LENGTHS)
    return [src[i, :n].tolist() for i, n in enumerate(LENGTHS)]


def _run(search: ContinuousSearch, sources, forced=None, seed: int = 1, drop_after: dict | None = None):
    """Sentences added 0 to 2 at a time between steps, in a seeded random pattern, so most join a batch already
    running; returns each sentence's hypotheses (by index) and how many joined while others ran. `drop_after`: a
    sentence dropped once it has run so many steps."""
    rng, found, nxt, joined_mid, steps = random.Random(seed), {}, 0, 0, 0
    drop_after, seen, dropped = drop_after or {}, {}, set()
    while nxt < len(sources) or search.running:
        for _ in range(rng.randint(0, 2)):
            if nxt < len(sources):
                joined_mid += search.running > 0
                search.add(nxt, sources[nxt], None if forced is None else forced[nxt])
                nxt += 1
        for key in [key for key in drop_after if key in search.keys]:  # running, rows in the cache
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > drop_after[key]:
                search.drop({key})
                dropped.add(key)
        found.update(search.step())
        steps += 1
        if search.cache is not None and search.keys:  # each running sentence holds k rows, each source one
            assert search.cache.rows == search.k * len(search.keys) and search.cache.sources == len(search.keys)
    assert dropped == set(drop_after)
    return found, joined_mid


def _alone(model, sources, request, forced=None):
    return [
        search_ids(
            model, [ids], request, asked=PerSource(forced=None if forced is None or forced[i] is None else [forced[i]])
        )[0]
        for i, ids in enumerate(sources)
    ]


def _assert_same(found, alone, indices):
    for i in indices:
        assert [h.tokens for h in found[i]] == [h.tokens for h in alone[i]], i
        assert [h.score for h in found[i]] == pytest.approx([h.score for h in alone[i]], abs=1e-4, nan_ok=True)
        assert [h.log_prob for h in found[i]] == pytest.approx([h.log_prob for h in alone[i]], abs=1e-4, nan_ok=True)
        for a, b in zip(found[i], alone[i], strict=True):
            assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-4)


INT8 = pytest.param("int8", marks=pytest.mark.skipif(int8_available() is not None, reason=str(int8_available())))


@pytest.mark.parametrize("precision", ["fp32", INT8])
@pytest.mark.parametrize(
    "options",
    [
        dict(beam_size=1),
        dict(beam_size=1, scores=False),
        dict(beam_size=4),
        dict(beam_size=4, n_best=3),
        dict(beam_size=3, early_stopping=True),
        dict(beam_size=4, early_stopping="heuristic", min_len=2),
    ],
    ids=["greedy", "greedy-no-scores", "beam4", "beam4-nbest3", "beam3-early", "beam4-heuristic-minlen"],
)
def test_rows_joining_mid_batch_get_what_each_gets_alone(model, options, precision):
    if precision == "int8":
        model = copy.deepcopy(model)
        quantize_int8(model)
    sources = _sources()
    request = DecodeRequest.of(max_len_a=1.0, max_len_b=6, **options)
    found, joined_mid = _run(ContinuousSearch(model, request, precision), sources)
    assert joined_mid >= len(sources) // 2  # most joined a running batch
    _assert_same(found, _alone(model, sources, request), range(len(sources)))
    if not request.scores:
        assert all(h.token_log_probs == () for hyps in found.values() for h in hyps)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_forced_first_tokens_and_rows_without_one_share_a_batch(model, beam_size):
    sources, request = _sources(2), DecodeRequest.of(beam_size=beam_size, max_len_a=1.0, max_len_b=5, min_len=1)
    forced = [5 + i % 3 if i % 2 else None for i in range(len(sources))]  # a target language each, or none
    found, _ = _run(ContinuousSearch(model, request), sources, forced)
    alone = _alone(model, sources, request, forced)
    _assert_same(found, alone, range(len(sources)))
    assert all(found[i][0].tokens[0] == forced[i] for i in range(len(sources)) if forced[i] is not None)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_dropped_sentence_leaves_and_the_others_are_unchanged(model, beam_size):
    sources, request = _sources(3), DecodeRequest.of(beam_size=beam_size, max_len_a=2.0, max_len_b=8)
    found, _ = _run(ContinuousSearch(model, request), sources, drop_after={0: 1, 3: 2})
    assert 0 not in found and 3 not in found  # a client gone: no result, its rows freed
    _assert_same(found, _alone(model, sources, request), [i for i in range(len(sources)) if i not in (0, 3)])


def test_a_beam_step_gathers_into_the_buffers_it_holds_and_drops_the_columns_every_row_has_left(model):
    """Once every sentence has joined, each beam step's reorder gathers the rows into the buffers the cache already
    holds (the same tensor objects, cycled: none allocated) unless a write needed more columns, and the columns
    before the oldest running row's start go in the same gather (the oldest row starts at column 0)."""
    sources, request = _sources(4), DecodeRequest.of(beam_size=4, max_len_a=2.0, max_len_b=8)
    search = ContinuousSearch(model, request)
    for i, ids in enumerate(sources[:6]):
        search.add(i, ids)
    search.step()  # all six join
    for i, ids in enumerate(sources[6:], 6):  # more join while those run: later rows start at later columns
        search.add(i, ids)
    search.step()
    search.step()
    cache, same, left = search.cache, 0, 0

    def held():
        return {id(t) for t in [*cache.keys, *cache.values, cache.spare]}, [t.shape for t in cache.keys]

    before = held()
    while search.keys:
        running = len(search.keys)
        search.step()
        left += running - len(search.keys)
        if not search.keys:
            break
        now = held()
        if now[1] == before[1]:  # no write grew the buffers: no buffer is new
            assert now[0] == before[0]
            same += 1
        before = now
        assert len(now[0]) == 2 * len(cache.keys) + 1
        assert int(cache.start.min()) == 0 and cache.length == int(cache.positions().max())
    assert same >= 3 and left >= 2  # steps checked; sentences left mid-run: columns dropped, not only rows


def test_what_a_continuous_batch_does_not_take_is_named(model):
    assert supports(model, DecodeRequest.of(beam_size=4)) is None
    assert supports(model, DecodeRequest.of(sampling=True)) == "sampling"
    with pytest.raises(ValueError, match="continuous batching does not take sampling"):
        ContinuousSearch(model, DecodeRequest.of(sampling=True))
