"""Decoding with CTranslate2 (`vaswani translate MODEL_DIR --engine ctranslate2`): the same contract as our
own search (token ids in, hypotheses out, in input order), on a CTranslate2 model converted once into
MODEL_DIR/ctranslate2/ and converted again when the model's weights change.

Settings map one to one, except the length penalty: CTranslate2 divides a hypothesis' log-probability
by length^alpha (the length counting EOS), ours by GNMT's ((5 + length) / 6)^alpha. At alpha 0 both are
the plain log-probability, and greedy and beam outputs are identical to ours (tests/export/).
The maximum length is the batch's longest allowed (a * source length + b), not each sentence's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from vaswani.config import DecodeConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.search import Hypothesis, length_batches, length_limits
from vaswani.export import CT2_TYPES, NEVER_GENERATED
from vaswani.model_dir import WEIGHTS
from vaswani.nn.transformer import Transformer

DIRECTORY = "ctranslate2"  # inside the model directory
_STAMP = "vaswani_source.json"


def _stamp(model_dir: Path) -> dict:
    """What a conversion was made from and by: the weights' content hash and both programs' versions."""
    import ctranslate2

    from vaswani import __version__

    digest = hashlib.sha256()
    with open(model_dir / WEIGHTS, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"weights_sha256": digest.hexdigest(), "vaswani": __version__, "ctranslate2": ctranslate2.__version__}


def converted(model_dir: str | Path) -> Path:
    """MODEL_DIR/ctranslate2, converted (float32) if missing or made from other weights or by other versions.

    Processes converting at once take turns (a lock file); a directory there that this function did not
    make (no stamp) is left alone and reported."""
    from vaswani.export.ctranslate2 import export_ctranslate2

    model_dir = Path(model_dir)
    target, stamp = model_dir / DIRECTORY, _stamp(model_dir)
    stamp_file = target / _STAMP
    with open(model_dir / ".ctranslate2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists() and not stamp_file.is_file():
            raise ValueError(f"{target} exists but was not made by --engine ctranslate2; move it elsewhere (export "
                             "into a directory of your own with `vaswani export`)")
        if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp and (target / "model.bin").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=".ctranslate2-", dir=model_dir))
        try:
            export_ctranslate2(model_dir, tmp)
            (tmp / _STAMP).write_text(json.dumps(stamp) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class CTranslate2Search:
    """Search with a CTranslate2 Translator; called like `search_ids` (see Translator)."""

    def __init__(self, model_dir: str | Path, model: Transformer, tokenizer: Tokenizer, device: torch.device,
                 compute_type: str = "float32") -> None:
        try:
            import ctranslate2
        except ImportError:
            raise ImportError("--engine ctranslate2 needs the ctranslate2 package: "
                              "pip install 'vaswani[ct2]'") from None
        if compute_type not in CT2_TYPES:
            raise ValueError(f"compute type {compute_type!r} is not one of {', '.join(CT2_TYPES)}")
        self.ctranslate2, self.compute_type = ctranslate2, compute_type
        self.path = converted(model_dir)
        self.config, self.tokenizer = model.config, tokenizer
        try:
            self.translator = ctranslate2.Translator(
                str(self.path), device=device.type, device_index=device.index or 0, compute_type=compute_type,
                inter_threads=1, intra_threads=torch.get_num_threads() if device.type == "cpu" else 0)
        except (RuntimeError, ValueError) as error:  # e.g. a compute type this device lacks
            supported = ", ".join(sorted(ctranslate2.get_supported_compute_types(device.type)))
            raise ValueError(f"CTranslate2 cannot load {self.path} on {device.type} as {compute_type}: "
                             f"{str(error).strip()} (this device supports: {supported})") from None

    def describe(self) -> str:
        return f"engine ctranslate2 {self.ctranslate2.__version__}, compute type {self.compute_type} ({self.path})"

    def __call__(self, sources: Sequence[Sequence[int]], decode: DecodeConfig, n_best: int = 1,
                 precision: str = "fp32", progress: Callable[[int], None] | None = None) -> list[list[Hypothesis]]:
        c, piece = self.config, self.tokenizer.src.id_to_piece
        out: list[list[Hypothesis]] = [[] for _ in sources]
        if decode.sampling:
            self.ctranslate2.set_random_seed(decode.seed)
        # Greedy search and sampling score by the plain log-probability, as ours (CTranslate2's default
        # length_penalty of 1 would average it per token).
        alpha = 0.0 if decode.sampling or decode.beam_size == 1 else decode.length_penalty
        for chunk in length_batches(sources, decode.batch_size):
            lengths = torch.tensor([len(sources[i]) + 1 for i in chunk])  # with EOS, as our search counts
            limit = int(length_limits(lengths, c, decode.max_len_a, decode.max_len_b).max())
            options = dict(max_batch_size=0, max_decoding_length=limit, min_decoding_length=0, max_input_length=0,
                           return_scores=True, suppress_sequences=[[p] for p in NEVER_GENERATED],
                           num_hypotheses=n_best, length_penalty=alpha)
            if decode.sampling:
                options.update(beam_size=1, sampling_topk=decode.top_k, sampling_topp=decode.top_p,
                               sampling_temperature=decode.temperature)
            else:
                options.update(beam_size=decode.beam_size)
            results = self.translator.translate_batch([[piece(i) for i in sources[i]] for i in chunk], **options)
            for i, result in zip(chunk, results, strict=True):
                hyps = []
                for tokens, score in zip(result.hypotheses, result.scores, strict=True):
                    ids = [self.tokenizer.tgt.piece_to_id(p) for p in tokens]
                    hyps.append(Hypothesis(ids, score * (len(ids) + 1) ** alpha, score))
                out[i] = hyps
            if progress is not None:
                progress(len(chunk))
        return out
