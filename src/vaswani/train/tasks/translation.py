"""Translation (the paper): parallel text, token-budget batches, label-smoothed cross-entropy, BLEU."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from vaswani.config import ModelConfig
from vaswani.data import store
from vaswani.data.batching import collate, padding_fraction, token_batches
from vaswani.data.parallel import ParallelRecipe
from vaswani.data.prepare import check_manifest, install_tokenizer, open_or_prepare, write_report
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.search import search_ids
from vaswani.evaluate import bleu
from vaswani.flops import lengths, training_flops
from vaswani.runtime import release_freed_memory
from vaswani.train.loader import EpochPlan, RunData, batch_stream, load_run_data
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import Task


class Translation(Task):
    name = "translation"

    def prepare(self, rank0: bool) -> RunData:
        c, model_dir = self.config, self.context.model_dir
        d = c.data
        d.require_training_data()
        recipe = ParallelRecipe.from_config(d, c.model.share_embeddings, c.train.seed)
        directory = Path(d.prepared) if d.prepared else model_dir / "prepared"
        if rank0:
            # a model directory that already has a tokenizer (a run begun before prepared data) keeps it
            has_own = all((model_dir / f).is_file() for f in Tokenizer.files(recipe.joint))
            existing = Tokenizer.load(model_dir) if has_own else None
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
        return data

    def model_config(self, data: RunData) -> ModelConfig:
        return dataclasses.replace(
            self.config.model,
            src_vocab_size=data.tokenizer.src_vocab_size,
            tgt_vocab_size=data.tokenizer.tgt_vocab_size,
        )

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

    def stream(self, data: RunData, epoch: int, position: int):
        t, run = self.config.train, self.context
        return batch_stream(
            data,
            self.plan,
            self.config.data,
            t.seed,
            epoch,
            position,
            run.rank,
            run.world,
            t.loader_workers,
            run.device,
        )

    def count(self, batch) -> int:
        return batch.tgt_tokens  # counted by the loader: no device sync in the step

    def flops(self, batch, config) -> float:
        pad = config.pad_id
        return training_flops(config, lengths(batch.src, pad), lengths(batch.tgt_in, pad), batch.tgt_tokens)

    def loss(self, wrapped, model, batch) -> torch.Tensor:
        loss, _ = label_smoothed_cross_entropy(
            wrapped(batch.src, batch.tgt_in),
            model.output_weight,
            batch.tgt_out,
            self.config.train.label_smoothing,
            self.config.model.pad_id,
        )
        return loss

    @torch.no_grad()
    def validate(self, model, data: RunData) -> dict[str, float]:
        """Loss and perplexity (no label smoothing) on the dev set, and BLEU of greedy translations."""
        if not data.valid:
            return {}
        c, device = self.config, self.context.device
        lengths = [(len(s), len(t)) for s, t in data.valid]
        total = tokens = 0.0
        for indices in token_batches(lengths, c.data.max_tokens, seed=0):
            batch = collate([data.valid[i] for i in indices], c.model.pad_id, c.model.bos_id, c.model.eos_id)
            batch = batch.to(device)
            loss, n = label_smoothed_cross_entropy(
                model.hidden_states(batch.src, batch.tgt_in), model.output_weight, batch.tgt_out, 0.0, c.model.pad_id
            )
            total, tokens = total + loss.item(), tokens + n.item()
        result = {"loss": total / tokens, "ppl": math.exp(min(total / tokens, 50))}
        n = min(len(data.valid), c.data.valid_max_sentences)
        hypotheses = self.translate_ids(model, [s for s, _ in data.valid[:n]])
        texts, references = data.tokenizer.decode_tgt(hypotheses), [t for _, t in data.valid_text[:n]]
        result["bleu"] = bleu(texts, references).score
        result["exact"] = sum(h == r for h, r in zip(texts, references, strict=True)) / n
        return result

    def translate_ids(self, model, sources: list[list[int]]) -> list[list[int]]:
        """Greedy translations of tokenized sources, in input order (the same code as `vaswani translate`;
        in the precision of the trainer's autocast, which it runs under)."""
        decode = dataclasses.replace(self.config.decode, beam_size=1, sampling=False)
        found = search_ids(model, sources, decode)
        return [hyps[0].tokens for hyps in found]
