"""Which lines can a user trust (issue 80, points 7-8): how well each signal decoding already computes predicts a
translation's quality, measured against sentence chrF (sacreBLEU's, against the reference), not by the signal's own
code.

    python benchmarks/confidence.py runs/quick      # benchmarks/results/confidence.json

Multi30k validation chooses (each signal's direction, the combination's weights, the low-confidence threshold);
test_2016_flickr and test_2017_flickr are the held-out checks, measured once with what validation chose. Signals,
each from the beam's output (beam 4, its 4 best kept) and the model's cross-attention:
- mean_prob: the mean probability of the best translation's tokens (vaswani's `confidence` before this issue);
- mean_log_prob: the mean of their log-probabilities, and geometric_mean_prob, its exponential;
- min_prob: the probability of its least likely token;
- score: the beam's own score (log-probability over GNMT's length penalty);
- agreement: the mean sentence chrF between the best translation and the other three of the 4-best;
- low_share: the share of its tokens the model gave under 0.5 (negated: more is worse);
- length_gap: |log(output tokens / source tokens)| (negated: a translation far longer or shorter than its source);
- margin: the best translation's beam score less the second's (a beam that hesitated between two: low);
- source_length: the source's words (negated: a long sentence is harder; not a quality signal alone, a modulator);
- entropy: the mean entropy of the model's next-token distributions along the best translation (negated: a model
  unsure among many words at each step), from one teacher-forced pass over it (Fomicheva et al. 2020, Seq-Ent);
- coverage: GNMT's coverage penalty (Wu et al. 2016) on that pass's cross-attention, averaged over layers and heads:
  the mean over source tokens of log(min(attention received, 1)) (low: source words never attended, dropped);
- attention_entropy: the mean entropy of each output token's cross-attention (negated: diffuse attention);
- round_trip (with --reverse, a model of the other direction): the geometric mean probability the reverse model
  gives the source's tokens, reading the translation (a teacher-forced pass, no search);
- back_translation (with --reverse): the reverse model's translation of the best translation back (its own search),
  sentence chrF against the source (round-trip translation);
- checkpoint_agreement (where the model directory keeps checkpoints/): the same best translation scored by the model and
  every saved checkpoint (teacher-forced; the last may hold the model's own weights), the spread of each token's
  probability across them, averaged and negated (an ensemble's disagreement, like Fomicheva et al.'s dropout variance;
  the quick recipe keeps its last 3);
- combined: a least-squares fit of sentence chrF on the standardised signals, fitted on validation only.
For each: Pearson and Spearman correlation with sentence chrF, and the mean chrF of the 10% least confident
sentences against the rest.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import provenance
from sacrebleu.metrics import CHRF

from vaswani.runtime.machine import cpu_name

DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k/raw"
RESULTS = Path(__file__).parent / "results" / "confidence.json"
SPLITS = {"val": "val", "test_2016": "test_2016_flickr", "test_2017": "test_2017_flickr"}
SIGNALS = (
    "mean_prob",
    "mean_log_prob",
    "geometric_mean_prob",
    "min_prob",
    "score",
    "agreement",
    "low_share",
    "length_gap",
    "margin",
    "source_length",
    "entropy",
    "coverage",
    "attention_entropy",
)
FORCED = ("entropy", "coverage", "attention_entropy")  # from a teacher-forced pass over the best translation


def read(name: str) -> list[str]:
    with gzip.open(name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def signals_of(translations, sources, sources_ids, chrf: CHRF) -> dict[str, list[float]]:
    """Each signal for each sentence, from the translations the Translator returned (n-best) and the sources' ids."""
    out: dict[str, list[float]] = {name: [] for name in SIGNALS if name not in FORCED}
    for t, source, ids in zip(translations, sources, sources_ids, strict=True):
        best, others = t.candidates[0], t.candidates[1:]
        lps = best.token_log_probs
        out["mean_prob"].append(best.confidence)
        out["mean_log_prob"].append(sum(lps) / len(lps))
        out["geometric_mean_prob"].append(math.exp(sum(lps) / len(lps)))
        out["min_prob"].append(math.exp(min(lps)))
        out["score"].append(best.score)
        agree = [chrf.sentence_score(best.text, [o.text]).score for o in others] if others else [100.0]
        out["agreement"].append(sum(agree) / len(agree))
        out["low_share"].append(-sum(lp < math.log(0.5) for lp in lps) / len(lps))
        out["length_gap"].append(-abs(math.log(len(lps) / (len(ids) + 1))))
        out["margin"].append(best.score - others[0].score if others else 0.0)
        out["source_length"].append(-float(len(source.split())))
    return out


def forced_signals(translator, sources_ids, translations) -> dict[str, list[float]]:
    """entropy, coverage and attention_entropy of each best translation, from one teacher-forced pass over it."""
    import torch

    model, c = translator.model, translator.model.config
    out: dict[str, list[float]] = {"entropy": [], "coverage": [], "attention_entropy": []}
    with torch.inference_mode():
        for ids, t in zip(sources_ids, translations, strict=True):
            tokens = t.candidates[0].tokens
            src = torch.tensor([[*ids, *c.source_end]])
            tgt_in = torch.tensor([[c.bos_id, *tokens]])
            log_probs = torch.log_softmax(model(src, tgt_in).float(), -1)[0]  # (T + 1, V)
            out["entropy"].append(-float((-(log_probs.exp() * log_probs).sum(-1)).mean()))
            cross = torch.stack(model.attention_weights(src, tgt_in).cross).float().mean((0, 2))[0]  # (T + 1, S)
            received = cross.sum(0).clamp(max=1.0)  # (S,)
            out["coverage"].append(float(received.clamp(min=1e-9).log().mean()))
            entropy = -(cross * cross.clamp(min=1e-9).log()).sum(-1)  # (T + 1,)
            out["attention_entropy"].append(-float(entropy.mean()))
    return out


def round_trip(reverse, sources: list[str], translations) -> list[float]:
    """The geometric mean probability of each source's tokens (EOS's too) under the reverse model, given the
    translation."""
    from vaswani.translate.term_placement import forced_log_probs

    after = reverse.config.decode.ban_after_softmax
    back = reverse.encode_sources([t.text for t in translations])
    targets = reverse.tokenizer.encode_tgt(sources)
    out = []
    for src_ids, tgt_ids in zip(back, targets, strict=True):
        picked = forced_log_probs(reverse.model, src_ids, [tgt_ids], after, pick=True)[0]
        out.append(math.exp(float(picked.mean())))  # a probability: a few hopeless sources do not swamp it
    return out


def back_translation(reverse, sources: list[str], translations, chrf: CHRF) -> list[float]:
    """Sentence chrF of each source against the reverse model's translation of its best translation."""
    back = reverse.translate([t.text for t in translations])
    return [chrf.sentence_score(b, [s]).score for b, s in zip(back, sources, strict=True)]


def checkpoint_models(model_dir: Path) -> list:
    """The models of `model_dir`'s saved checkpoints: its model built afresh (unpacked, fp32) with each checkpoint's
    weights read in."""
    from vaswani.model_dir import load_model, read_weights_into
    from vaswani.train.checkpoint import checkpoint_dirs

    models = []
    for checkpoint in checkpoint_dirs(model_dir):
        model, _ = load_model(model_dir)
        read_weights_into(model, checkpoint / "model.safetensors")
        models.append(model)
    return models


def checkpoint_agreement(translator, others: list, sources_ids, translations) -> list[float]:
    """Minus the mean over tokens of the spread (standard deviation) of each chosen token's probability across the
    model and its checkpoints' models, the best translation teacher-forced through each."""
    import torch

    from vaswani.translate.term_placement import forced_log_probs

    after = translator.config.decode.ban_after_softmax
    out = []
    with torch.inference_mode():
        for ids, t in zip(sources_ids, translations, strict=True):
            tokens = [t.candidates[0].tokens]
            probs = torch.stack(
                [forced_log_probs(m, ids, tokens, after, pick=True)[0].exp() for m in [translator.model, *others]]
            )
            out.append(-float(probs.std(0).mean()))
    return out


def ranks(x: np.ndarray) -> np.ndarray:
    order = x.argsort(kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for value in np.unique(x):  # ties share their mean rank
        tied = x == value
        r[tied] = r[tied].mean()
    return r


def judge(signal: np.ndarray, quality: np.ndarray) -> dict[str, float]:
    pearson = float(np.corrcoef(signal, quality)[0, 1])
    spearman = float(np.corrcoef(ranks(signal), ranks(quality))[0, 1])
    low = signal <= np.quantile(signal, 0.10)
    return {
        "pearson": round(pearson, 4),
        "spearman": round(spearman, 4),
        "chrf_least_sure_10pct": round(float(quality[low].mean()), 2),
        "chrf_rest": round(float(quality[~low].mean()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--reverse", help="a model of the other direction (en→de): the round_trip signal")
    parser.add_argument("--limit", type=int, default=0, help="sentences a split (0: all)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--dump", help="also write every sentence's signals and chrF here (JSON), for other fits")
    args = parser.parse_args()
    from vaswani.translate.translator import Translator

    translator = Translator.load(args.model_dir)
    reverse = Translator.load(args.reverse) if args.reverse else None
    others = checkpoint_models(Path(args.model_dir))
    signals = (
        *SIGNALS,
        *(("round_trip", "back_translation") if reverse else ()),
        *(("checkpoint_agreement",) if others else ()),
    )
    request = translator.request(beam_size=4, n_best=4)
    chrf = CHRF()
    measured: dict[str, dict] = {}
    for split, stem in SPLITS.items():
        sources, references = read(DATA / f"{stem}.de.gz"), read(DATA / f"{stem}.en.gz")
        if args.limit:
            sources, references = sources[: args.limit], references[: args.limit]
        started = time.perf_counter()
        translations = translator.translate_with_details(sources, request)
        seconds = time.perf_counter() - started
        quality = [chrf.sentence_score(t.text, [r]).score for t, r in zip(translations, references, strict=True)]
        sources_ids = translator.encode_sources(sources)
        found = signals_of(translations, sources, sources_ids, chrf)
        found.update(forced_signals(translator, sources_ids, translations))
        if reverse is not None:
            found["round_trip"] = round_trip(reverse, sources, translations)
            found["back_translation"] = back_translation(reverse, sources, translations, chrf)
        if others:
            found["checkpoint_agreement"] = checkpoint_agreement(translator, others, sources_ids, translations)
        measured[split] = {"signals": found, "chrf": quality, "seconds": seconds}
        print(f"{split}: {len(sources)} sentences in {seconds:.0f} s", file=sys.stderr)
    if args.dump:
        Path(args.dump).write_text(
            json.dumps({split: {"signals": m["signals"], "chrf": m["chrf"]} for split, m in measured.items()})
        )
    # the combination: fitted on validation alone, standardised with validation's means and deviations
    val = measured["val"]
    x_val = np.array([val["signals"][name] for name in signals]).T
    mean, std = x_val.mean(0), x_val.std(0) + 1e-12
    design = np.c_[(x_val - mean) / std, np.ones(len(x_val))]
    weights, *_ = np.linalg.lstsq(design, np.array(val["chrf"]), rcond=None)
    # the same fit without the teacher-forced pass's signals: what that pass adds
    apart = [i for i, name in enumerate(signals) if name not in FORCED]
    weights_apart, *_ = np.linalg.lstsq(design[:, [*apart, -1]], np.array(val["chrf"]), rcond=None)
    table: dict[str, dict] = {}
    for split, m in measured.items():
        quality = np.array(m["chrf"])
        x = np.array([m["signals"][name] for name in signals]).T
        rows = {name: judge(x[:, i], quality) for i, name in enumerate(signals)}
        standard = np.c_[(x - mean) / std, np.ones(len(x))]
        rows["combined"] = judge(standard @ weights, quality)
        rows["combined_without_forced_pass"] = judge(standard[:, [*apart, -1]] @ weights_apart, quality)
        table[split] = {"sentences": len(quality), "mean_chrf": round(float(quality.mean()), 2), "signals": rows}
    commit = provenance.commit()
    result = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_name(),
        "threads": os.cpu_count(),
        "model": args.model_dir,
        "reverse_model": args.reverse,
        "checkpoints": len(others),
        "decoding": "beam 4, 4-best, fp32",
        "chosen_on": "val",
        "held_out": ["test_2016", "test_2017"],
        "best_single_on_val": max(signals, key=lambda n: table["val"]["signals"][n]["pearson"]),
        # vaswani's confidence (mean_prob) under which a tenth of validation's sentences fall: the page's default
        "mean_prob_val_10pct": round(float(np.quantile(val["signals"]["mean_prob"], 0.10)), 4),
        "combined_weights": dict(zip([*signals, "intercept"], np.round(weights, 4).tolist(), strict=True)),
        "splits": table,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for split, row in table.items():
        print(split, json.dumps({k: v["pearson"] for k, v in row["signals"].items()}))


if __name__ == "__main__":
    main()
