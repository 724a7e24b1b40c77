import random

import numpy as np

from vaswani.data.batching import _costs, collate, epoch_order, padding_fraction, token_batches


def _lengths(n=500, seed=0):
    """Source lengths 1..40 and correlated target lengths, as in translation."""
    rng = random.Random(seed)
    sources = [rng.randint(1, 40) for _ in range(n)]
    return [(s, max(1, int(s * rng.uniform(0.8, 1.3)))) for s in sources]


def test_every_sentence_once_and_budget_kept():
    lengths = _lengths()
    batches = token_batches(lengths, max_tokens=300, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(max(lengths[i]) + 1 for i in b) <= 300


def test_a_sentence_longer_than_the_budget_gets_its_own_batch():
    batches = token_batches([(3, 3), (500, 2), (4, 4)], max_tokens=50, seed=0)
    assert [1] in [b.tolist() for b in batches] and sorted(i for b in batches for i in b) == [0, 1, 2]


def test_bucketing_pads_less_than_naive_batching():
    lengths = _lengths(2000)
    bucketed = padding_fraction(lengths, token_batches(lengths, 1000, seed=0))
    naive = padding_fraction(lengths, token_batches(lengths, 1000, seed=0, bucketed=False))
    assert bucketed < naive / 2


def test_shuffling_is_reproducible_and_changes_with_seed_and_epoch():
    assert epoch_order(50, seed=1, epoch=0) == epoch_order(50, seed=1, epoch=0)
    assert epoch_order(50, seed=1, epoch=0) != epoch_order(50, seed=1, epoch=1)
    same = zip(token_batches(_lengths(), 300, seed=1), token_batches(_lengths(), 300, seed=1), strict=True)
    assert all(np.array_equal(a, b) for a, b in same)
    assert not np.array_equal(
        np.concatenate(token_batches(_lengths(), 300, seed=1)), np.concatenate(token_batches(_lengths(), 300, seed=2))
    )


def test_vectorised_packing_equals_a_pair_by_pair_greedy_packing():
    """The reference: walk the pairs in the same sorted order, one at a time, as a loop would."""
    lengths = np.array([*_lengths(3000, seed=3), (900, 1)])  # one pair over the budget too
    for max_tokens in (50, 300, 4000):
        costs = _costs(lengths)
        order = np.random.default_rng(7).permutation(len(lengths))
        order = order[np.argsort(costs[order], kind="stable")]
        expected, current, longest = [], [], 0
        for i in order.tolist():
            if current and max(longest, costs[i]) * (len(current) + 1) > max_tokens:
                expected.append(current)
                current, longest = [], 0
            current.append(i)
            longest = max(longest, costs[i])
        expected.append(current)
        assert [b.tolist() for b in token_batches(lengths, max_tokens, seed=7)] == expected


def test_collate_shifts_the_target_right_and_appends_eos():
    batch = collate([([5, 6], [7]), ([8], [9, 10])], pad_id=0, bos_id=1, eos_id=2)
    assert batch.src.tolist() == [[5, 6, 2], [8, 2, 0]]
    assert batch.tgt_in.tolist() == [[1, 7, 0], [1, 9, 10]]
    assert batch.tgt_out.tolist() == [[7, 2, 0], [9, 10, 2]]
    assert batch.tgt_tokens == 5
    # model.source_eos false (NLLB's legacy layout: the tokenizer wrote `text </s> code`): the source as it is
    legacy = collate([([5, 2, 30], [7]), ([8, 2, 31, 6], [9, 10])], pad_id=0, bos_id=1, eos_id=2, source_eos=False)
    assert legacy.src.tolist() == [[5, 2, 30, 0], [8, 2, 31, 6]]
    assert legacy.tgt_out.tolist() == batch.tgt_out.tolist()
