"""Translator: raw text in, detokenized text out, from a model directory.

translator = Translator.load("runs/multi30k_de_en")
translator.translate(["Ein Mann fährt Fahrrad."])            # ['A man rides a bike.']
translator.translate_with_details(lines, n_best=4, attention=True)  # texts, scores, attention
request = translator.request(beam_size=5, n_best=2)                 # validated once (decode/request.py), then
translator.translate_with_details(lines, request)                   # passed as it is
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from vaswani.config import Config
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.ct2_engine import CTranslate2Engine
from vaswani.decode.engine import ENGINES, Engine, TorchEngine
from vaswani.decode.glossary import missing as glossary_missing
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import Hypothesis
from vaswani.decode.shortlist import FILE as SHORTLIST_FILE
from vaswani.decode.shortlist import FREQUENT, TOP, Shortlist, Vocabularies, check_sizes
from vaswani.decode.shortlist import learn as learn_shortlist
from vaswani.families import TRANSLATE, family
from vaswani.model_dir import WEIGHTS, load_model, load_tokenizer
from vaswani.nn import Transformer
from vaswani.nn.transformer import AttentionWeights
from vaswani.runtime.device import pick_device
from vaswani.runtime.mapped import map_lookups
from vaswani.runtime.precision import Choice, check
from vaswani.translate.align import alignments
from vaswani.translate.language_id import UNDETERMINED, LanguageIdentifier
from vaswani.translate.language_policy import AUTO, LanguageCodes, policy_for
from vaswani.translate.term_placement import TermPlacement, forced_log_probs
from vaswani.translate.translation import Candidate, Translation, one_line

Warn = Callable[[int, str], None]  # (index of the input sentence, message)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A job's sentences made ready for the search (Translator.prepare): each one's source ids (cut to the model's
    limit: `truncated`), which are searched (`todo`: not empty, not copied) and the token each of those starts with
    (`forced`, a many-to-many model's target language; None: none), and what is reported beside the translations."""

    sentences: list[str]
    request: DecodeRequest
    ids: list[list[int]]
    todo: list[int]
    forced: list[int] | None
    truncated: set[int]
    detected: list[tuple[str, float]] | None
    others: list | None
    copied: list

    @property
    def searched(self) -> list[str]:
        return [self.sentences[i] for i in self.todo]

    @property
    def sources(self) -> list[list[int]]:
        return [self.ids[i] for i in self.todo]


class Translator:
    """A trained model, its tokenizer, its decoding settings and the engine that decodes with them.

    `engine`: our own search on the model (TorchEngine, the default) or another with the same interface
    (decode/engine.py: CTranslate2Engine). The torch model is kept for what only it answers: attention
    weights and the scores of given targets."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, config: Config, engine: Engine | None = None) -> None:
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.engine: Engine = engine or TorchEngine(self.model)
        # how the model is told its languages (translate/language_policy.py): asked by every caller alike
        self.languages = policy_for(tokenizer, config)
        # where a glossary's terms go (translate/term_placement.py): its own parts, chosen here once
        self.terms = TermPlacement(self.model, tokenizer, self.engine)

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        device: str = "auto",
        precision: str = "auto",
        engine: str = "torch",
        compute_type: str = "float32",
        shortlist: str | Path | bool | None = None,
    ) -> Translator:
        """The model in `model_dir` (written by `vaswani train`, or averaged by `vaswani average`).

        `shortlist` (engine torch; decode/shortlist.py): True reads `model_dir`/shortlist.safetensors (written by
        `vaswani shortlist`), a path reads that file; each batch's output layer then covers only the target words
        its sources may produce.
        `precision` (engine torch): "auto" (fp32), "fp32", "bf16" or "int8" (a CPU's: nn/cpu_linear/int8.py).
        `engine="ctranslate2"` decodes with CTranslate2 in `compute_type` (float32 gives our outputs;
        int8 is faster) the model converted into `model_dir`/ctranslate2 (vaswani.export.ctranslate2.converted)."""
        check_engine(engine, precision)
        if shortlist and engine != "torch":
            raise ValueError("--shortlist applies to --engine torch (our own search)")
        where = _shortlist_path(model_dir, shortlist)
        words = None if where is None else Shortlist.load(where)  # read before the model: a wrong file named at once
        device = pick_device(device)
        # With CTranslate2 the torch model only answers attention requests: it stays on the CPU.
        model, config = load_model(model_dir, device if engine == "torch" else "cpu")
        family(config.model.type).check(TRANSLATE, str(model_dir))
        tokenizer = load_tokenizer(model_dir, config)  # a tokenizer of another run is named here, not mid-batch
        if engine == "torch":
            if words is not None:
                words.check(config.model.src_vocab_size, config.model.tgt_vocab_size, str(where))
            translator = cls(model, tokenizer, config, TorchEngine(model, precision, owned=True, shortlist=words))
            # the embeddings read a row a token: from the weights file, mapped (the output matrix too where its
            # projection runs on a packed or int8 copy, or on a shortlist's rows)
            map_lookups(model, Path(model_dir) / WEIGHTS, model.output_projection is not None or words is not None)
            return translator
        ct2 = CTranslate2Engine(model_dir, config.model, tokenizer, device, compute_type)
        return cls(model, tokenizer, config, ct2)

    def choose_precision(self, request: DecodeRequest) -> Choice:
        """The precision this request decodes in (measured once per batch shape for "auto")."""
        return self.engine.choose_precision(request)

    @property
    def max_source_tokens(self) -> int:
        """Longest source the model takes, in tokens, before the EOS it appends (model.source_end)."""
        return self.model.config.max_positions - len(self.model.config.source_end)

    def request(self, **settings: Any) -> DecodeRequest:
        """A decoding request: the model's decode section with `settings` (DecodeConfig fields, None keeping the
        model's; and the request's own: n_best, attention, a glossary (decode/glossary.py), alignment, scores,
        other_languages), validated (a one-line ConfigError or ValueError)."""
        return DecodeRequest.of(self.config.decode, **settings)

    def _request(self, request: DecodeRequest | None, options: dict[str, Any]) -> DecodeRequest:
        if request is None:
            return self.request(**options)
        if options:
            raise TypeError(f"give a DecodeRequest or decoding options, not both (got {', '.join(sorted(options))})")
        return request

    def _normalise(self, text: str) -> str:
        text = text.strip()
        return text.lower() if self.config.data.lowercase else text  # trained on lowercased text

    def encode_sources(
        self,
        sentences: Sequence[str],
        target_language: str | Sequence[str | None] | None = None,
        source_language: str | None = None,
    ) -> list[list[int]]:
        """Source token ids as the model reads them (stripped, lowercased where it was trained so), before EOS.
        `target_language`: a multilingual model's `>>lang<<` token put before every sentence (in place of one the
        sentence starts with), as OPUS-MT's models are asked for a language; empty sentences stay empty. A model
        of several target languages refuses, in one line listing them, a sentence without one: it would translate
        into whichever language it drifts to. A many-to-many model's source starts with `source_language`'s code
        (data/languages.py); both languages are checked, in one line listing the model's codes (its target language
        may be one per sentence: `forced`)."""
        texts = [self._normalise(s) for s in sentences]
        return self.languages.encode(self.tokenizer, texts, target_language, source_language)

    @functools.cached_property
    def identifier(self) -> LanguageIdentifier:
        """What tells a text's language (translate/language_id.py), made at its first use."""
        return LanguageIdentifier()

    def detect_sources(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """Each text's source language as this many-to-many model's code, detected, and its probability. A text
        whose language is not sure (`und`) or not one of the model's is read as most of the others were (0.0);
        where none is sure, as the model's default source; else a one-line ValueError."""
        if not isinstance(self.languages, LanguageCodes):
            self.languages.check(None, AUTO)  # this model reads one language: said in one line
        found = self.identifier.detect([self._normalise(t) for t in texts])
        codes = [None if d.language == "und" else self.languages.code_for(d.language) for d in found]
        known = Counter(code for code in codes if code)
        fallback = known.most_common(1)[0][0] if known else self.languages.languages.default_source
        if fallback is None and any(t.strip() for t in texts):
            raise ValueError(
                "--source-language auto: no line's language could be told apart (too short, or none of this "
                "model's): give --source-language"
            )
        return [(code, d.probability) if code else (fallback or "", 0.0) for code, d in zip(codes, found, strict=True)]

    def other_languages(self, sentences: Sequence[str], required: bool = False) -> list[tuple[str, float] | None]:
        """For a model of one source language, each sentence detected (above the identifier's threshold) as another
        language: its ISO 639 code and probability; else None. All None where the model's source language is not
        known, or (unless `required`: --other-languages copy) where no identifier is installed (vaswani[detect])."""
        if self.languages.reads("en") is None:
            return [None] * len(sentences)
        try:
            found = self.identifier.detect([s.strip() for s in sentences])
        except ImportError:
            if required:
                raise
            return [None] * len(sentences)
        foreign = lambda d: d.language != UNDETERMINED and not self.languages.reads(d.language)  # noqa: E731
        return [(d.language, d.probability) if foreign(d) else None for d in found]

    def translate(
        self,
        sentences: Sequence[str],
        request: DecodeRequest | None = None,
        progress: Callable[[int], None] | None = None,
        target_language: str | None = None,
        source_language: str | None = None,
        **options: Any,
    ) -> list[str]:
        """One translation per sentence, in order; an empty sentence gives an empty translation.
        `target_language`: a multilingual model's target (see encode_sources).
        `request` (`self.request(...)`), or `options`: any DecodeConfig field (beam_size, length_penalty, sampling,
        top_p, ...)."""
        request = self._request(request, options).replace(scores=False)  # the texts alone: greedy skips the softmax
        results = self.translate_with_details(
            sentences, request, progress=progress, target_language=target_language, source_language=source_language
        )
        return [t.text for t in results]

    def translate_with_details(
        self,
        sentences: Sequence[str],
        request: DecodeRequest | None = None,
        warn: Warn | None = None,
        progress: Callable[[int], None] | None = None,
        encoded: Sequence[list[int]] | None = None,
        target_language: str | Sequence[str | None] | None = None,
        source_language: str | None = None,
        **options: Any,
    ) -> list[Translation]:
        """Like `translate`, with the request's n_best candidates and their scores, and with its `attention`
        the attention weights of the best candidate (options: n_best=, attention= and DecodeConfig fields).
        Over-long sentences are cut to `max_source_tokens` and reported through `warn(index, message)`.
        `encoded`: the sentences' `encode_sources`, where the caller has them already (the server counts tokens
        with them). `target_language` (`source_language`): a multilingual model's target (source) language, for every
        sentence; a many-to-many model's may be one per sentence (sentences into different languages share a batch:
        the server's requests do). The request's `other_languages` (a model of one source language): translate, each
        sentence detected as another language marked (`Translation.other_language`); copy, such sentences copied
        unchanged instead of translated."""
        request = self._request(request, options)
        job = self.prepare(sentences, request, warn, progress, encoded, target_language, source_language)
        found = self._search(job.searched, job.sources, request, progress, job.forced)
        return self.finish(job, found, warn)

    def continuous(self, request: DecodeRequest):
        """A running batch for `request` that sentences join and leave at every step (decode/continuous.py:
        ContinuousSearch), where the engine runs one for it; else None (search in batches: translate_with_details)."""
        start = getattr(self.engine, "continuous", None)
        return None if start is None else start(request)

    def prepare(
        self,
        sentences: Sequence[str],
        request: DecodeRequest,
        warn: Warn | None = None,
        progress: Callable[[int], None] | None = None,
        encoded: Sequence[list[int]] | None = None,
        target_language: str | Sequence[str | None] | None = None,
        source_language: str | None = None,
    ) -> Prepared:
        """What `translate_with_details` searches for (its arguments): the sources, their forced first tokens, which
        sentences are left out (empty, copied); `finish` makes the translations of the search's hypotheses. The
        server's continuous batch (serve/continuous.py) runs the search between them."""
        mode = request.other_languages
        others = self.other_languages(sentences, mode == "copy") if mode else None
        copied = others if mode == "copy" else [None] * len(sentences)
        ids, detected = self._encoded(sentences, encoded, target_language, source_language)
        truncated = self._cut(ids, warn)
        todo = [i for i, x in enumerate(ids) if x and not copied[i]]  # empty lines stay empty, without the model
        if progress is not None and len(todo) < len(ids):
            progress(len(ids) - len(todo))
        forced = self.languages.forced(target_language, len(sentences))
        forced = None if forced is None else [forced[i] for i in todo]
        return Prepared(list(sentences), request, ids, todo, forced, truncated, detected, others, copied)

    def finish(self, job: Prepared, found: Sequence[list[Hypothesis]], warn: Warn | None = None) -> list[Translation]:
        """The translations of a prepared job (`prepare`) from the hypotheses `found` for its sentences searched."""
        sentences, request, ids = job.sentences, job.request, job.ids
        terms = self.terms.targets(sentences, request.glossary)
        results: list[list[Hypothesis]] = [[] for _ in sentences]
        for i, hyps in zip(job.todo, found, strict=True):
            results[i] = hyps
        translations = []
        for i, (sentence, hyps, candidates) in enumerate(
            zip(sentences, results, self._candidates(results), strict=True)
        ):
            missing = None if terms is None else tuple(glossary_missing(terms[i], candidates[0].text if hyps else ""))
            translation = Translation(
                sentence,
                candidates,
                truncated=i in job.truncated,
                missing_terms=missing,
                detected=None if job.detected is None or not sentence.strip() else job.detected[i],
                other_language=job.others[i] if job.others else None,
            )
            if missing and warn is not None:
                shown = ", ".join(repr(term) for term in missing)
                warn(i, f"glossary term(s) {shown} not in the translation (not met within the length limit)")
            if request.attention and hyps:
                translation = self._with_attention(translation, ids[i], hyps[0].tokens)
            translations.append(translation)
        if request.alignment:
            aligned = alignments(self.model, self.tokenizer, translations, ids)
            translations = [dataclasses.replace(t, alignment=a) for t, a in zip(translations, aligned, strict=True)]
        copied = job.copied
        return [Translation.copied(s, c) if c else t for s, t, c in zip(sentences, translations, copied, strict=True)]

    def _candidates(self, results: Sequence[Sequence[Hypothesis]]) -> list[list[Candidate]]:
        """Each sentence's hypotheses as candidates, their texts decoded in one call."""
        texts = iter(self.tokenizer.decode_tgt([h.tokens for hyps in results for h in hyps]))
        return [
            [
                Candidate(one_line(next(texts)), h.tokens, h.log_prob, h.score, h.confidence, h.token_log_probs)
                for h in hyps
            ]
            for hyps in results
        ]

    def _encoded(self, sentences, encoded, target_language, source_language):
        """The sentences' source ids (`encoded` where the caller has them), and with source_language auto each
        sentence's detected language (else None)."""
        if encoded is not None:
            if len(encoded) != len(sentences):
                raise ValueError(f"{len(encoded)} encoded sentences for {len(sentences)} sentences")
            return list(encoded), None
        detected = None
        if source_language == AUTO:
            detected = self.detect_sources(sentences)
            source_language = [code for code, _ in detected]
        return self.encode_sources(sentences, target_language, source_language), detected

    def _cut(self, ids: list[list[int]], warn: Warn | None) -> set[int]:
        """Sources longer than `max_source_tokens` cut to it (in place) and reported through `warn`; their
        indices."""
        limit, truncated = self.max_source_tokens, set()
        for i, x in enumerate(ids):
            if len(x) > limit:
                truncated.add(i)
                if warn is not None:
                    warn(i, f"{len(x)} tokens, more than the model's {limit}: translated the first {limit}")
                ids[i] = self.tokenizer.cut_source(x, limit)
        return truncated

    def _search(
        self, sentences: Sequence[str], ids: list[list[int]], request: DecodeRequest, progress, forced=None
    ) -> list[list[Hypothesis]]:
        """The engine's hypotheses for `ids`; with a glossary, the plain ones with its terms put in the place of the
        model's own words (translate/term_placement.py), so that a sentence without terms is translated as without
        the glossary. `forced`: see Translator.forced."""
        found = self.engine(ids, request, progress, forced=forced)
        if request.glossary is None:
            return found
        return self.terms.place(sentences, ids, found, request, forced)

    def learn_shortlist(
        self,
        sources: Sequence[str],
        targets: Sequence[str] | None = None,
        top: int = TOP,
        frequent: int = FREQUENT,
        progress: Callable[[int], None] | None = None,
        target_language: str | None = None,
    ) -> Shortlist:
        """A vocabulary shortlist for this model (decode/shortlist.py) from parallel lines, or, without `targets`,
        from the model's own greedy translations of `sources` (an imported model without its training data; a
        multilingual one into `target_language`). `progress(n)`: n sentences translated, then one per pass over
        the lines."""
        check_sizes(top, frequent)  # before minutes of translating
        src_ids = self.encode_sources(sources, target_language)
        if targets is None:
            request = self.request(beam_size=1, sampling=False)
            found = self.translate_with_details(sources, request, progress=progress, encoded=src_ids)
            tgt_ids = [t.candidates[0].tokens if t.candidates else [] for t in found]
        else:
            tgt_ids = self.tokenizer.encode_tgt([self._normalise(t) for t in targets])
        c = self.model.config
        return learn_shortlist(
            src_ids,
            tgt_ids,
            Vocabularies(c.src_vocab_size, c.tgt_vocab_size, c.eos_id, copy=self.tokenizer.joint),
            top=top,
            frequent=frequent,
            progress=progress,
            origin="data" if targets is not None else "model",
        )

    def attention(self, source: str, target: str | None = None, **options: Any) -> Translation:
        """The attention weights of every layer and head for `source` and `target`, or (without a target)
        the model's own best translation, found with `options` (DecodeConfig fields). A given target is
        scored by the model: its candidate's log_prob is the sum of its tokens' log-probabilities."""
        if target is None:
            return self.translate_with_details([source], attention=True, **options)[0]
        src_ids = self.encode_sources([source])[0]
        tgt_ids = self.tokenizer.encode_tgt([self._normalise(target)])[0]
        limit = self.max_source_tokens
        truncated = len(src_ids) > limit or len(tgt_ids) > limit
        src_ids, tgt_ids = self.tokenizer.cut_source(src_ids, limit), tgt_ids[:limit]
        log_prob = self._log_prob(src_ids, tgt_ids)
        candidate = Candidate(target, tgt_ids, log_prob, log_prob)
        return self._with_attention(Translation(source, [candidate], truncated=truncated), src_ids, tgt_ids)

    def _pair(self, src_ids: list[int], tgt_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        c, device = self.model.config, next(self.model.parameters()).device
        return (
            torch.tensor([[*src_ids, *c.source_end]], device=device),
            torch.tensor([[c.bos_id, *tgt_ids]], device=device),
        )

    def _log_prob(self, src_ids: list[int], tgt_ids: list[int], eos: bool = True) -> float:
        """log P(target [+ EOS] | source) as the search scores it over the whole vocabulary (a shortlist's search
        normalises over its words): PAD and BOS are never generated, their probability spread over the other
        tokens, or lost with decode.ban_after_softmax."""
        after_softmax = self.config.decode.ban_after_softmax
        picked = forced_log_probs(self.model, src_ids, [tgt_ids], after_softmax, pick=True)[0]  # (T + 1,)
        return float(picked.sum() if eos else picked[:-1].sum())

    @torch.inference_mode()
    def _with_attention(self, translation: Translation, src_ids: list[int], tgt_ids: list[int]) -> Translation:
        # A hypothesis cut at the length limit may fill every position: BOS + it must fit max_positions.
        tgt_ids = tgt_ids[: self.model.config.max_positions - 1]
        weights = self.model.attention_weights(*self._pair(src_ids, tgt_ids))
        groups = (weights.encoder, weights.decoder_self, weights.cross)
        weights = AttentionWeights(*([w[0].float().cpu() for w in group] for group in groups))
        pieces = self.tokenizer
        src_pieces = [pieces.src.id_to_piece(i) for i in [*src_ids, *self.model.config.source_end]]
        tgt_pieces = [pieces.tgt.id_to_piece(i) for i in tgt_ids] + ["</s>"]
        return dataclasses.replace(translation, attention=weights, src_pieces=src_pieces, tgt_pieces=tgt_pieces)


def _shortlist_path(model_dir: str | Path, given: str | Path | bool | None) -> Path | None:
    """The file of the shortlist asked for (True: the model directory's own); None for none."""
    if given is None or given is False:
        return None
    return Path(model_dir) / SHORTLIST_FILE if given is True else Path(given)


def check_engine(engine: str, precision: str) -> None:
    """A one-line ValueError unless `precision` is one `engine` runs in (CTranslate2 takes a compute type)."""
    check(precision, decoding=True)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "torch" and precision != "auto":
        raise ValueError(
            f"--precision {precision} applies to --engine torch; for CTranslate2 use --compute-type "
            "(float32, int8, bfloat16, ...)"
        )
