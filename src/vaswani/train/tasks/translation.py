"""Translation (the paper): parallel text, token-budget batches, label-smoothed cross-entropy, BLEU.

Fine-tuning (vaswani finetune, finetune.original_src/original_tgt): every in-domain batch is joined by a
batch of the original training data (its own prepared directory, the same tokenizer and token budget), and
the loss is in-domain + λ · original, each per target token (λ = finetune.aux_weight)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import torch

from vaswani.config import ConfigError, ModelConfig
from vaswani.data import store
from vaswani.data.batching import collate, epoch_order, padding_fraction, token_batches, with_replay
from vaswani.data.parallel import ParallelRecipe
from vaswani.data.prepare import check_manifest, install_tokenizer, open_or_prepare, write_report
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import PerSource, search_ids
from vaswani.evaluate import bleu
from vaswani.runtime.allocator import release_freed_memory
from vaswani.runtime.flops import lengths, training_flops
from vaswani.train.loader import EpochPlan, Reader, RunData, batch_stream, load_run_data
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import Task


class Translation(Task):
    name = "translation"
    original: tuple[RunData, EpochPlan] | None = None  # fine-tuning with λ: the original data and its batches

    def prepare(self, rank0: bool) -> RunData:
        c, model_dir = self.config, self.context.model_dir
        d = c.data
        d.require_training_data()
        recipe = ParallelRecipe.from_config(d, c.model.share_embeddings, c.train.seed)
        directory = Path(d.prepared) if d.prepared else model_dir / "prepared"
        if rank0:
            # a model directory that already has a tokenizer (a run begun before prepared data, a fine-tuned
            # model's copy of its pretrained one) keeps it
            existing = Tokenizer.load(model_dir) if Tokenizer.present(model_dir) else None
            prepared = open_or_prepare(recipe, directory, existing, log=self.log, console=self.context.console)
            tokenizer = install_tokenizer(prepared, model_dir)
            write_report(prepared, model_dir)
        else:
            check_manifest(recipe, directory, store.read_manifest(directory))
            prepared = store.PreparedData.open(directory)
            tokenizer = Tokenizer.load(directory)
        for name, part in prepared.manifest["report"]["corpora"].items():
            removed = ", ".join(f"{n} {reason}" for reason, n in sorted(part["removed"].items())) or "none"
            self.log(
                f"training data{'' if name in ('train', 'toy') else ' ' + name}: {part['kept']} of "
                f"{part['total']} pairs kept; removed: {removed}"
            )
        data = load_run_data(prepared, tokenizer, d)
        self.plan = EpochPlan(data, d.max_tokens, c.train.seed)
        self.original = self._original(rank0, tokenizer) if c.finetune.original_src else None
        return data

    def _original(self, rank0: bool, tokenizer: Tokenizer) -> tuple[RunData, EpochPlan]:
        """The original training data's sample, prepared with the model's tokenizer, and its batches."""
        c, model_dir = self.config, self.context.model_dir
        f = c.finetune
        d = dataclasses.replace(
            c.data,
            train_src=f.original_src,
            train_tgt=f.original_tgt,
            corpora=None,
            valid_src="",
            valid_tgt="",
            src_sampling_alpha=0.0,
            tgt_sampling_alpha=0.0,
        )
        recipe = ParallelRecipe.from_config(d, c.model.share_embeddings, c.train.seed)
        directory = model_dir / "prepared-original"
        if rank0:
            prepared = open_or_prepare(recipe, directory, tokenizer, log=self.log, console=self.context.console)
        else:
            check_manifest(recipe, directory, store.read_manifest(directory))
            prepared = store.PreparedData.open(directory)
        report = prepared.manifest["report"]
        self.log(
            f"original data (λ = {f.aux_weight:g}): {report['kept']} of {report['total']} pairs of "
            f"{f.original_src}, a batch of them with every batch"
        )
        original = load_run_data(prepared, tokenizer, d)
        return original, EpochPlan(original, d.max_tokens, c.train.seed + 1)

    def _special(self) -> tuple[int, int, int, bool]:
        """collate's ids and its source_eos, as the model reads a batch."""
        m = self.config.model
        return m.pad_id, m.bos_id, m.eos_id, m.source_eos

    def model_config(self, data: RunData) -> ModelConfig:
        return dataclasses.replace(
            self.config.model,
            src_vocab_size=data.tokenizer.src_vocab_size,
            tgt_vocab_size=data.tokenizer.tgt_vocab_size,
        )

    def target_words(self, data: RunData) -> np.ndarray:
        """The target pieces of the prepared training data and EOS, which ends every target (with fine-tuning's
        original data, its targets too). Shape: (V_tgt,) bool"""
        c = self.config
        if c.data.tgt_sampling_alpha:
            raise ConfigError(
                "model.output_words target keeps the pieces the prepared targets use, but data.tgt_sampling_alpha "
                "segments each batch's targets afresh (other pieces); set one of them back: output_words: all, or "
                "tgt_sampling_alpha: 0"
            )
        seen = np.zeros(c.model.tgt_vocab_size, dtype=bool)
        for run in (data, *(() if self.original is None else (self.original[0],))):
            flat = run.prepared.train.tgt.values
            for start in range(0, len(flat), 1 << 24):  # bincount's int64 copy, 128 MB at a time
                seen[np.flatnonzero(np.bincount(flat[start : start + (1 << 24)], minlength=len(seen)))] = True
        seen[c.model.eos_id] = True
        return seen

    def describe(self, data: RunData) -> None:
        d = self.config.data
        batches = self.plan.batches(0)
        self.log(
            f"{len(batches):,} batches of up to {d.max_tokens} tokens, padding "
            f"{padding_fraction(data.prepared.train.lengths, batches):.1%}"
        )
        release_freed_memory()  # the sort's transient arrays: ~10 bytes a pair, not kept for the run
        if self.plan.weighted:
            self.log(
                "corpus weights "
                + ", ".join(f"{c['name']} {w:g}" for c, w in zip(data.prepared.corpora, data.weights, strict=True))
                + ": each epoch samples its pairs and batches them afresh"
            )
        if d.src_sampling_alpha or d.tgt_sampling_alpha:
            self.log(
                f"subword sampling (source alpha {d.src_sampling_alpha}, target alpha {d.tgt_sampling_alpha}): "
                "each batch's text is segmented afresh when the batch is made"
            )

    def epoch_batches(self, data: RunData) -> int | None:
        return len(self.plan.batches(0))

    def stream(self, data: RunData, epoch: int, position: int):
        t, run = self.config.train, self.context
        batches = batch_stream(
            data,
            self.plan,
            self.config.data,
            t.seed,
            epoch,
            position,
            Reader(run.rank, run.world, t.loader_workers, run.device),
            self._special(),
        )
        return batches if self.original is None else self._with_original(batches)

    def _with_original(self, batches):
        """Each batch joined by the original data's batch for its place in the run: a function of (epoch,
        position, rank) only, so a resumed run draws the same ones. The original batches are taken in a
        shuffled order, all of them before any again."""
        original, plan = self.original
        run, seed, special = self.context, self.config.train.seed + 1, self._special()
        split = original.prepared.train
        all_batches = plan.batches(0)
        M = len(all_batches)
        orders: dict[int, tuple[int, ...]] = {}
        for epoch, position, batch in batches:
            k = epoch * len(self.plan.batches(epoch)) + position - run.world + run.rank  # this batch's place
            round_, j = divmod(k, M)
            if round_ not in orders:
                orders = {round_: epoch_order(M, seed, round_)}
            pairs = [split.pair(i) for i in all_batches[orders[round_][j]].tolist()]
            yield epoch, position, with_replay(batch, collate(pairs, *special), special[0])

    def count(self, batch) -> int:
        return batch.tgt_tokens  # counted by the loader: no device sync in the step

    def flops(self, batch, config) -> float:
        pad, predicted = config.pad_id, batch.tgt_tokens + batch.replay_tokens
        return training_flops(config, lengths(batch.src, pad), lengths(batch.tgt_in, pad), predicted)

    def loss(self, wrapped, model, batch) -> torch.Tensor:
        """Summed over the in-domain target tokens; with original pairs joined (fine-tuning with λ), plus λ times
        their loss per token, scaled by the in-domain tokens so that the trainer's division leaves the means."""
        hidden = wrapped(batch.src, batch.tgt_in)
        n = batch.src.size(0) - batch.replay
        words = model.output_ids()

        def loss_of(rows: slice) -> torch.Tensor:
            loss, _ = label_smoothed_cross_entropy(
                hidden[rows],
                model.output_weight,
                batch.tgt_out[rows],
                self.config.train.label_smoothing,
                self.config.model.pad_id,
                bias=model.output_bias,
                words=words,
            )
            return loss

        if not batch.replay:
            return loss_of(slice(None))
        original = loss_of(slice(n, None)) * (batch.tgt_tokens / max(1, batch.replay_tokens))
        return loss_of(slice(0, n)) + self.config.finetune.aux_weight * original

    @torch.no_grad()
    def validate(self, model, data: RunData) -> dict[str, float]:
        """Loss and perplexity (no label smoothing) on the dev set, and BLEU of greedy translations."""
        if not data.valid:
            return {}
        c, device = self.config, self.context.device
        lengths = [(len(s), len(t)) for s, t in data.valid]
        total = tokens = 0.0
        words = model.output_ids()
        for indices in token_batches(lengths, c.data.max_tokens, seed=0):
            batch = collate([data.valid[i] for i in indices], *self._special())
            batch = batch.to(device)
            loss, n = label_smoothed_cross_entropy(
                model.hidden_states(batch.src, batch.tgt_in),
                model.output_weight,
                batch.tgt_out,
                0.0,
                c.model.pad_id,
                bias=model.output_bias,
                words=words,
            )
            total, tokens = total + loss.item(), tokens + n.item()
        result = {"loss": total / tokens, "ppl": math.exp(min(total / tokens, 50))}
        n = min(len(data.valid), c.data.valid_max_sentences)
        hypotheses = self.translate_ids(model, [s for s, _ in data.valid[:n]], data.tokenizer)
        texts, references = data.tokenizer.decode_tgt(hypotheses), [t for _, t in data.valid_text[:n]]
        result["bleu"] = bleu(texts, references).score
        result["exact"] = sum(h == r for h, r in zip(texts, references, strict=True)) / n
        return result

    def translate_ids(self, model, sources: list[list[int]], tokenizer: Tokenizer) -> list[list[int]]:
        """Greedy translations of tokenized sources, in input order (the same code as `vaswani translate`;
        in the precision of the trainer's autocast, which it runs under); into data.target_language where a
        many-to-many pair is trained (its code the first output token, as translation forces it)."""
        request = DecodeRequest.of(self.config.decode, scores=False, beam_size=1, sampling=False)
        target = self.config.data.target_language  # a many-to-many pair's: the first output token (its code)
        forced = [tokenizer.languages.id(target, "target")] * len(sources) if target else None
        found = search_ids(model, sources, request, asked=PerSource(forced=forced))
        return [hyps[0].tokens for hyps in found]
