"""Decoding with CTranslate2 (`vaswani translate MODEL_DIR --engine ctranslate2`): the same contract as our
own search (token ids in, hypotheses out, in input order), on a CTranslate2 model converted into
MODEL_DIR/ctranslate2/ by export (vaswani.export.ctranslate2.converted: once, and again when the model's
weights change); this module only checks that the conversion is current and runs it.

Settings map one to one, except the length penalty: CTranslate2 divides a hypothesis' log-probability
by length^alpha (the length counting EOS), ours by GNMT's ((5 + length) / 6)^alpha unless decode.length_rule is
power (an imported Marian's default), which is CTranslate2's. At alpha 0 both are the plain log-probability, and
greedy and beam outputs are identical to ours (tests/export/).
The maximum length is the batch's longest allowed (a * source length + b), not each sentence's own.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vaswani.config import ModelConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.engine import CT2_TYPES
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import Hypothesis, length_batches, length_limits
from vaswani.model_dir import WEIGHTS
from vaswani.runtime.precision import Choice

if TYPE_CHECKING:
    from vaswani.decode.terms import Constraints

DIRECTORY = "ctranslate2"  # inside the model directory
STAMP = "vaswani_source.json"  # what the conversion was made from (see stamp)


def stamp(model_dir: Path) -> dict:
    """What a conversion is made from and by: the weights' content hash and both programs' versions."""
    import ctranslate2

    from vaswani import __version__

    digest = hashlib.sha256()
    with open(model_dir / WEIGHTS, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"weights_sha256": digest.hexdigest(), "vaswani": __version__, "ctranslate2": ctranslate2.__version__}


def current(model_dir: str | Path) -> Path | None:
    """MODEL_DIR/ctranslate2 when it was converted from these weights by these versions, else None."""
    target = Path(model_dir) / DIRECTORY
    made = target / STAMP
    if made.is_file() and (target / "model.bin").is_file() and json.loads(made.read_text()) == stamp(Path(model_dir)):
        return target
    return None


class CTranslate2Engine:
    """Search with a CTranslate2 Translator on the model converted into MODEL_DIR/ctranslate2 (the Engine
    interface of decode/engine.py). The conversion is export's (vaswani.export.ctranslate2.converted)."""

    def __init__(
        self,
        model_dir: str | Path,
        config: ModelConfig,
        tokenizer: Tokenizer,
        device: torch.device,
        compute_type: str = "float32",
    ) -> None:
        try:
            import ctranslate2
        except ImportError:
            raise ImportError(
                "--engine ctranslate2 needs the ctranslate2 package: pip install 'vaswani[ct2]'"
            ) from None
        if compute_type not in CT2_TYPES:
            raise ValueError(f"compute type {compute_type!r} is not one of {', '.join(CT2_TYPES)}")
        path = current(model_dir)
        if path is None:
            raise ValueError(
                f"{Path(model_dir) / DIRECTORY} is missing or was converted from other weights; convert "
                "it with vaswani.export.ctranslate2.converted(MODEL_DIR) (vaswani translate --engine "
                "ctranslate2 does so itself)"
            )
        self.ctranslate2, self.compute_type, self.path = ctranslate2, compute_type, path
        self.config, self.tokenizer = config, tokenizer
        try:
            self.translator = ctranslate2.Translator(
                str(self.path),
                device=device.type,
                device_index=device.index or 0,
                compute_type=compute_type,
                inter_threads=1,
                intra_threads=torch.get_num_threads() if device.type == "cpu" else 0,
            )
        except (RuntimeError, ValueError) as error:  # e.g. a compute type this device lacks
            supported = ", ".join(sorted(ctranslate2.get_supported_compute_types(device.type)))
            raise ValueError(
                f"CTranslate2 cannot load {self.path} on {device.type} as {compute_type}: "
                f"{str(error).strip()} (this device supports: {supported})"
            ) from None

    def choose_precision(self, request: DecodeRequest) -> Choice:
        return Choice("fp32", "fp32")  # the compute type decides (describe)

    def prepare(self, request: DecodeRequest) -> Choice:
        return self.choose_precision(request)

    def describe(self) -> str:
        return f"engine ctranslate2 {self.ctranslate2.__version__}, compute type {self.compute_type} ({self.path})"

    def __call__(
        self,
        sources: Sequence[Sequence[int]],
        request: DecodeRequest,
        progress: Callable[[int], None] | None = None,
        constraints: Constraints | None = None,
        forced: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        if constraints is not None and any(constraints):
            raise ValueError("a glossary needs our own search (--engine torch): CTranslate2 has no constrained search")
        c, piece, decode = self.config, self.tokenizer.src.id_to_piece, request.decode
        out: list[list[Hypothesis]] = [[] for _ in sources]
        if decode.sampling:
            self.ctranslate2.set_random_seed(decode.seed)
        # Greedy search and sampling score by the plain log-probability, as ours (CTranslate2's default
        # length_penalty of 1 would average it per token).
        alpha = 0.0 if decode.sampling or decode.beam_size == 1 else decode.length_penalty
        for chunk in length_batches(sources, decode.batch_size):
            lengths = torch.tensor([len(sources[i]) + len(c.source_end) for i in chunk])  # as our search counts
            limit = int(length_limits(lengths, c, decode.max_len_a, decode.max_len_b).max())
            options = dict(
                max_batch_size=0,
                max_decoding_length=limit,
                min_decoding_length=decode.min_len,
                max_input_length=0,
                return_scores=request.scores,
                # never generated: PAD and the start token, unless it is EOS (fairseq's decoders start from EOS)
                suppress_sequences=[[self.tokenizer.tgt.id_to_piece(i)] for i in (c.pad_id, c.bos_id) if i != c.eos_id],
                num_hypotheses=request.n_best,
                length_penalty=alpha,
                no_repeat_ngram_size=decode.no_repeat_ngram,
                repetition_penalty=decode.repetition_penalty,
            )
            if decode.sampling:
                options.update(
                    beam_size=1,
                    sampling_topk=decode.top_k,
                    sampling_topp=decode.top_p,
                    sampling_temperature=decode.temperature,
                )
            else:
                options.update(beam_size=decode.beam_size)
            if forced is not None:  # the target language's code: CTranslate2's target prefix (in its hypotheses)
                options["target_prefix"] = [[self.tokenizer.tgt.id_to_piece(forced[i])] for i in chunk]
            results = self.translator.translate_batch([[piece(i) for i in sources[i]] for i in chunk], **options)
            for i, result in zip(chunk, results, strict=True):
                hyps = []
                scores = result.scores if request.scores else [math.nan] * len(result.hypotheses)
                for tokens, score in zip(result.hypotheses, scores, strict=True):
                    ids = [self.tokenizer.tgt.piece_to_id(p) for p in tokens]
                    hyps.append(Hypothesis(ids, score * (len(ids) + 1) ** alpha, score))
                out[i] = hyps
            if progress is not None:
                progress(len(chunk))
        return out
