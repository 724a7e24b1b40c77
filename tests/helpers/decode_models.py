"""Small models the decoding tests search with."""

import torch

from tests.helpers.common import tiny_config
from vaswani import Transformer


def random_model(vocab: int, seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(src_vocab_size=vocab, tgt_vocab_size=vocab)).eval()


def constrained_beam_search(model, src, terms, request, cache: bool = True, step=None, continues_word=None):
    """Beam search with the terms' strategy (decode/terms.py): per source, the token ids of each term."""
    from vaswani.decode.beam import beam_search
    from vaswani.decode.terms import Constraints, TermContinuations

    sentences = Constraints.of(terms).sentences
    strategy = TermContinuations(request, sentences, continues_word, model.config.eos_id)
    return beam_search(model, src, request, cache, step=step, strategy=strategy)
