"""The decode section: how a translation model searches (§6.1), the defaults of `vaswani translate`,
`vaswani serve` and the greedy translations scored at each validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vaswani.config.fields import ConfigError
from vaswani.config.train import PRECISIONS

DECODING_PRECISIONS = (*PRECISIONS, "int8")  # int8: decoding on a CPU only (nn/cpu_linear/int8.py)


@dataclass(frozen=True)
class DecodeConfig:
    """Search settings; defaults are the paper's §6.1 (beam 4, alpha 0.6, input length + 50).

    Each field is a default that `vaswani translate` (--sample, --temperature, ...) and `Translator.translate`
    override one by one, so all of them take effect, sampling's included where decode.sampling is false."""

    beam_size: int = 4  # 1 is greedy search
    length_penalty: float = 0.6  # α of the length penalty
    # How a finished hypothesis's log-probability is normalised: gnmt, ((5 + |Y|) / 6)^α (Wu et al. 2016, the
    # paper's tensor2tensor code); power, |Y|^α (Hugging Face's generate, fairseq, CTranslate2: what an
    # imported Marian model was tuned with). |Y| counts the generated tokens, EOS included.
    length_rule: Literal["gnmt", "power"] = "gnmt"
    max_len_a: float = 1.0  # maximum output length = a * source length + b (§6.1: input + 50)
    max_len_b: int = 50
    min_len: int = 0  # EOS is not allowed before this many output tokens
    # False: a sentence ends when no live hypothesis can beat its best finished one (tensor2tensor,
    # the paper's code; transformers' "never"); True: as soon as beam_size hypotheses have finished (fairseq;
    # faster, shorter); "heuristic": when beam_size have finished and the best live one, scored at its current
    # length, does not beat the worst of them (transformers' early_stopping false, an imported model's default)
    early_stopping: bool | Literal["heuristic"] = False
    # An output cut at the length limit ends in an EOS that costs nothing and counts in its length
    # (transformers' forced_eos_token_id; the imported Marian models' setting)
    forced_eos: bool = False
    # PAD and BOS are never generated: banned before the softmax, their probability spread over the other tokens
    # (CTranslate2's way); true: after it, their probability lost (transformers' generate, fairseq: the imported
    # Marian models' setting, so that beam search ranks hypotheses as generate does)
    ban_after_softmax: bool = False
    # No repetition loops (decode/repetition.py): no n-gram of this length twice in an output (0: off; fairseq's
    # --no-repeat-ngram-size), and transformers' repetition penalty on tokens already output (1: off)
    no_repeat_ngram: int = 0
    repetition_penalty: float = 1.0
    batch_size: int = 64  # sentences per decoding batch
    sampling: bool = False  # sample instead of searching (beam_size is then ignored)
    temperature: float = 1.0
    top_k: int = 0  # sample among the k most probable tokens; 0: all
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens with this much probability
    seed: int = 1  # sampling is repeatable for a given seed and batch size
    # torch.compile the decoder's step (engine torch, search.compiled_step): its dozen variants compile as they come
    # (minutes in all on a CPU), then each step runs as one compiled program; it pays where the step is overhead
    # (one sentence at a time on a CPU), for a server (which compiles at startup) or a big file. On a GPU the static
    # cache's CUDA graphs run instead (static_cache auto), faster than the compiled step (engine.choose_step)
    compile: bool = False
    # The decoder's keys/values in buffers allocated once and written in place (decode/static.py), so a step has
    # fixed shapes; on a GPU each step is then one CUDA graph replayed. auto: on a GPU, not on a CPU (where the
    # step's launches cost little: docs/benchmarks.md, "GPU decoding"). Outputs are the same.
    static_cache: bool | Literal["auto"] = "auto"

    def validate(self) -> None:
        if self.beam_size <= 0 or self.batch_size <= 0:
            raise ConfigError("decode.beam_size and decode.batch_size must be positive")
        if min(self.length_penalty, self.max_len_a, self.max_len_b, self.min_len) < 0:
            raise ConfigError(
                "decode.length_penalty, decode.max_len_a, decode.max_len_b and decode.min_len must be >= 0"
            )
        if not isinstance(self.early_stopping, bool) and self.early_stopping != "heuristic":  # 1 == True: no
            raise ConfigError(f"decode.early_stopping must be true, false or heuristic, got {self.early_stopping!r}")
        if self.no_repeat_ngram < 0:
            raise ConfigError(f"decode.no_repeat_ngram must be >= 0 (0 is off), got {self.no_repeat_ngram}")
        if self.repetition_penalty <= 0:
            raise ConfigError(f"decode.repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}")
        if not isinstance(self.static_cache, bool) and self.static_cache != "auto":
            raise ConfigError(f"decode.static_cache must be true, false or auto, got {self.static_cache!r}")
        if self.compile and self.static_cache is True:
            raise ConfigError("decode.compile and decode.static_cache are two ways to a lean step: choose one")
        if self.length_rule not in ("gnmt", "power"):
            raise ConfigError(f"decode.length_rule must be gnmt or power, got {self.length_rule!r}")
        if self.temperature <= 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("decode.temperature must be > 0, decode.top_k >= 0 and decode.top_p in (0, 1]")
        if not 0 <= self.seed < 2**63:  # what torch takes as a seed
            raise ConfigError(f"decode.seed must be an integer from 0 to 2^63 - 1, got {self.seed!r}")
