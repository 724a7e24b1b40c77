"""Speed race: vaswani against Hugging Face MarianMTModel and torch.nn.Transformer, side by side.

All three get the same architecture: post-norm, embeddings shared between source, target and the
pre-softmax matrix and scaled by sqrt(d_model), sinusoidal positions, the same d_model / heads /
layers / d_ff / dropout / vocabulary (the Multi30k recipe's, `--preset tiny`, 8,000 subwords).

Training: target tokens/s on identical batches (Multi30k sentence lengths, ~4,000-token buckets),
each model trained the way its users do: vaswani its trainer's step (label-smoothed loss over the
real target positions), the peers full logits and torch's label-smoothed cross-entropy; fused Adam
for all; steps alternate between the models. Decoding: the same test_2016_flickr source batches,
the same beam size, exactly --steps decoding steps for every sentence (EOS forbidden before then),
so the work is equal; vaswani's search against `MarianMTModel.generate` (KV cache on), for large
batches and for one sentence at a time (interactive use). Each table also gives the matrix-product
floor (floor.py): the speed of the model's matrix products alone, which bounds what any faithful
implementation could reach on these kernels.

    pip install -e '.[bench]'
    python benchmarks/race.py                     # both races; --only training|decoding for one
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import torch
from floor import decoding_seconds, gemm_seconds, training_shapes
from torch import nn
from train_step import TorchBaseline, alternate, logits_loss, make_batches

from vaswani import ModelConfig, Transformer
from vaswani.config import Config
from vaswani.data.batching import collate
from vaswani.data.corpus import read_lines
from vaswani.data.tokenizer import Tokenizer
from vaswani.decode.request import DecodeRequest
from vaswani.decode.search import beam_search, compiled_step, greedy, length_batches
from vaswani.export.ctranslate2 import converted
from vaswani.model_dir import WEIGHTS, load_model, save_weights, weights_of, write_model_directory
from vaswani.runtime.allocator import keep_freed_memory
from vaswani.runtime.flops import lengths, mfu, training_flops
from vaswani.runtime.machine import cpu_name
from vaswani.runtime.precision import bf16_emulated
from vaswani.train.loss import label_smoothed_cross_entropy
from vaswani.train.tasks.base import HiddenStates

THREADS = torch.get_num_threads()
DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "multi30k" / "raw"


def marian(c: ModelConfig) -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        d_model=c.d_model,
        encoder_layers=c.n_layers,
        decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        dropout=c.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="relu",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        max_position_embeddings=512,
        pad_token_id=c.pad_id,
        eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None,
    )
    return MarianMTModel(config)


class MarianLogits(nn.Module):
    """MarianMTModel called as its users call it for training: padding masks in, logits out."""

    def __init__(self, model: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.model, self.pad_id = model, pad_id

    def forward(self, src, tgt_in):
        return self.model(
            input_ids=src,
            attention_mask=(src != self.pad_id).long(),
            decoder_input_ids=tgt_in,
            decoder_attention_mask=(tgt_in != self.pad_id).long(),
        ).logits


def vaswani_loss(model: Transformer, batch: tuple) -> torch.Tensor:
    src, tgt_in, tgt_out = batch
    total, tokens = label_smoothed_cross_entropy(
        model.hidden_states(src, tgt_in), model.output_weight, tgt_out, 0.1, model.config.pad_id
    )
    return total / tokens


class Compiled(nn.Module):
    """vaswani's model with its final states computed by torch.compile (dynamic shapes), as train.compile runs it."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.hidden = torch.compile(HiddenStates(model), dynamic=True)

    def loss(self, batch: tuple) -> torch.Tensor:
        src, tgt_in, tgt_out = batch
        total, tokens = label_smoothed_cross_entropy(
            self.hidden(src, tgt_in), self.model.output_weight, tgt_out, 0.1, self.model.config.pad_id
        )
        return total / tokens


def train_race(
    config: ModelConfig,
    batches: list,
    steps: int,
    warmup: int,
    bf16: bool,
    device: torch.device,
    compiled: bool = False,
) -> dict[str, float]:
    torch.manual_seed(0)
    runs = {
        "vaswani": (Transformer(config), vaswani_loss),
        "Marian (HF)": (MarianLogits(marian(config), config.pad_id), logits_loss),
        "torch.nn.Transformer": (TorchBaseline(config), logits_loss),
    }
    if compiled:  # train.compile: the same step through torch.compile; its compiling counted (alternate's overall)
        runs["vaswani compiled"] = (Compiled(Transformer(config)), lambda module, batch: module.loss(batch))
    rates = alternate(runs, batches, steps, warmup, bf16, device, overall=frozenset({"vaswani compiled"}))
    flops = statistics.median(
        training_flops(config, lengths(src, 0), lengths(tgt_in, 0), int((tgt_out != 0).sum()))
        / int((tgt_out != 0).sum())
        for src, tgt_in, tgt_out in batches[:50]
    )  # model FLOPs per target token (vaswani/runtime/flops.py), the same for every contender
    rates["FLOPs per token"] = flops
    if device.type != "cpu":
        return rates  # the floor times CPU products
    dtype = torch.bfloat16 if bf16 else torch.float32
    floor = []
    for i in range(warmup, warmup + steps):  # the batches alternate() measured
        src, tgt_in, tgt_out = batches[i % len(batches)]
        tokens = int((tgt_out != 0).sum())
        floor.append(tokens / gemm_seconds(training_shapes(config, src, tgt_in, tokens), dtype, backward=True))
    return {**rates, "matrix-product floor": statistics.median(floor)}


DECODERS = ("vaswani", "CTranslate2 float32", "CTranslate2 int8", "Marian (HF) generate")
# also: "CTranslate2 float16" (a GPU's), "vaswani compiled" (decode.compile: the warm-up batch compiles, untimed)


def _decode_worker(
    decoder: str, model_dir: str, batches: list[list[list[int]]], beam: int, steps: int, bf16: bool, device: str
) -> float:
    """Seconds one decoder takes for all `batches`, exactly `steps` steps per sentence, in a fresh process."""
    torch.set_num_threads(THREADS)
    keep_freed_memory()
    device = torch.device(device)
    model, config = load_model(model_dir, device)
    c = config.model
    context = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    if decoder.startswith("CTranslate2"):
        import ctranslate2

        tokenizer = Tokenizer.load(model_dir)
        translator = ctranslate2.Translator(
            str(Path(model_dir) / "ctranslate2"),
            device=device.type,
            intra_threads=THREADS,
            compute_type=decoder.split()[-1] if not bf16 else "bfloat16",
        )
        piece = tokenizer.src.id_to_piece

        def run(sources):
            out = translator.translate_batch(
                [[piece(i) for i in s] for s in sources],
                beam_size=beam,
                max_decoding_length=steps,
                min_decoding_length=steps,
                max_batch_size=0,
            )
            assert all(len(r.hypotheses[0]) == steps for r in out)
    elif decoder.startswith("Marian"):
        from vaswani.export.huggingface import to_marian

        marian = to_marian(model, config).to(device)

        def run(sources):
            src = collate([(s, []) for s in sources], c.pad_id, c.bos_id, c.eos_id).src.to(device)
            generated = marian.generate(
                input_ids=src,
                attention_mask=(src != c.pad_id).long(),
                num_beams=beam,
                do_sample=False,
                min_new_tokens=steps,
                max_new_tokens=steps,
                early_stopping=False,
                use_cache=True,
            )
            assert generated.size(1) == steps + 1  # decoder start token + steps
    else:
        step = compiled_step(model) if decoder == "vaswani compiled" else None
        request = DecodeRequest.of(beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps)

        def run(sources):
            src = collate([(s, []) for s in sources], c.pad_id, c.bos_id, c.eos_id).src.to(device)
            if beam == 1:
                out = greedy(model, src, request, step=step)
                assert all(len(h.tokens) == steps for h in out)
            else:
                out = beam_search(model, src, request, step=step)
                assert all(len(h[0].tokens) == steps for h in out)

    with torch.inference_mode(), context:
        run(batches[0])  # warm-up, not timed
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        for sources in batches:
            run(sources)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - began


def decode_race(
    model_dir: Path,
    sources: list[list[int]],
    beam: int,
    steps: int,
    batch_size: int,
    bf16: bool,
    rounds: int,
    device: str = "cpu",
    decoders: tuple[str, ...] = DECODERS,
) -> dict[str, float]:
    """Target tokens/s (sentences x steps / seconds) of each decoder on the same batches: each decoder runs
    alone in a fresh process (two OpenMP runtimes in one process, torch's and CTranslate2's, slow each
    other's small products down ~2x once both have run), decoders alternate, the median of `rounds`."""
    batches = [[sources[i] for i in chunk] for chunk in length_batches(sources, batch_size)]
    seconds: dict[str, list[float]] = {name: [] for name in decoders}
    spawn = multiprocessing.get_context("spawn")
    for _ in range(rounds):
        for name in decoders:
            if name.startswith("CTranslate2"):
                import ctranslate2

                kinds = ctranslate2.get_supported_compute_types(device)  # float16: GPUs only
                wanted = "bfloat16" if bf16 and name.endswith("float32") else None if bf16 else name.split()[-1]
                if wanted not in kinds:
                    continue
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                seconds[name].append(
                    pool.submit(_decode_worker, name, str(model_dir), batches, beam, steps, bf16, device).result()
                )
    c = load_model(model_dir)[1].model
    tokens = len(sources) * steps
    rates = {name: tokens / statistics.median(s) for name, s in seconds.items() if s}
    if device != "cpu":  # the floor times CPU products
        return rates
    floor = sum(
        decoding_seconds(
            c, len(b), max(map(len, b)) + 1, len(b) * beam, steps, torch.bfloat16 if bf16 else torch.float32
        )
        for b in batches
    )
    return {**rates, "matrix-product floor": tokens / floor}


def _decoding_model(model_dir: str | None, config: ModelConfig, tokenizer: Tokenizer, tmp: Path, ct2: bool) -> Path:
    """A model directory for every decoder: the trained one given, or an untrained `config` model with
    `tokenizer`; its CTranslate2 conversion (float32, made by vaswani.export) inside it."""
    if model_dir:
        if ct2:
            converted(model_dir)
        return Path(model_dir)
    directory = tmp / "model"
    directory.mkdir()
    torch.manual_seed(0)
    write_model_directory(directory, Config(model=config))
    save_weights(weights_of(Transformer(config)), directory / WEIGHTS)
    tokenizer.save(directory)
    if ct2:
        converted(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=1000, help="test_2016_flickr sentences to decode")
    parser.add_argument("--steps", type=int, default=20, help="decoding steps per sentence")
    parser.add_argument(
        "--batch-sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[64, 1],
        help="sentences per decoding batch, comma-separated",
    )
    parser.add_argument("--tokenizer", help="a model directory whose tokenizer to use (default: train one)")
    parser.add_argument("--only", choices=["training", "decoding"], help="run one of the two races")
    parser.add_argument("--model-dir", help="decode with this trained model (default: an untrained --preset model)")
    parser.add_argument("--rounds", type=int, default=3, help="decoding: runs of each decoder, alternating")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both races)")
    parser.add_argument(
        "--max-tokens", type=int, default=4000, help="training: target tokens per batch (the paper: 25,000 per step)"
    )
    parser.add_argument(
        "--decoders",
        type=lambda v: tuple(v.split(",")),
        default=DECODERS,
        help=f"decoding: comma-separated subset of {','.join(DECODERS)}, CTranslate2 float16 (a GPU's), "
        "vaswani compiled",
    )
    parser.add_argument("--data", type=Path, default=DATA, help="Multi30k's raw/ directory")
    parser.add_argument(
        "--compile", action="store_true", help="training: also race vaswani's step through torch.compile"
    )
    args = parser.parse_args()
    keep_freed_memory()  # for every contender alike
    import transformers

    data = args.data
    de, en = read_lines(data / "train.de.gz"), read_lines(data / "train.en.gz")
    if args.tokenizer or args.model_dir:
        tokenizer = Tokenizer.load(args.tokenizer or args.model_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = Tokenizer.train(de, en, args.vocab_size, "bpe", joint=True, directory=tmp)
    config = ModelConfig.preset(args.preset, vocab_size=tokenizer.src_vocab_size)
    if args.model_dir:
        config = load_model(args.model_dir)[1].model
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else cpu_name()
    print(
        f"# {device}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads; d_model {config.d_model}, "
        f"{config.n_layers}+{config.decoder_layers} layers, {config.n_heads} heads, d_ff {config.d_ff}, "
        f"dropout {config.dropout}, vocabulary "
        f"{config.src_vocab_size}"
    )
    pairs = list(zip(tokenizer.encode_src(de[:12000]), tokenizer.encode_tgt(en[:12000]), strict=True))
    batches = make_batches([(len(s) + 1, len(t) + 1) for s, t in pairs], args.max_tokens, args.vocab_size)
    sources = tokenizer.encode_src(read_lines(data / "test_2016_flickr.de.gz")[: args.sentences])

    if args.only != "decoding":
        train_table(config, batches, args.train_steps, args.warmup, torch.device(args.device), args.compile)
    if args.only != "training":
        with tempfile.TemporaryDirectory() as tmp:
            ct2 = any(name.startswith("CTranslate2") for name in args.decoders)
            model_dir = _decoding_model(args.model_dir, config, tokenizer, Path(tmp), ct2)
            version = f"ctranslate2 {__import__('ctranslate2').__version__}; " if ct2 else ""
            print(
                f"\n# decoding on {args.device}: {model_dir if args.model_dir else 'untrained ' + args.preset} "
                f"model; {version}each decoder alone in a fresh process, median of {args.rounds} rounds"
            )
            decode_table(model_dir, sources, args.steps, args.batch_sizes, args.rounds, args.device, args.decoders)


# The paper's recipes (§5.2): steps x target tokens per step (~25,000 source + 25,000 target tokens a batch)
PAPER_RECIPES = {"base": 100_000 * 25_000, "big": 300_000 * 25_000}


def train_table(
    config: ModelConfig, batches: list, steps: int, warmup: int, device: torch.device, compiled: bool = False
) -> None:
    extra = " vaswani compiled tok/s | compiled vs eager |" if compiled else ""
    if compiled:
        print("\n# vs faster peer, MFU and the recipes' hours: the faster of vaswani eager and compiled")
    print(
        "\n| training | vaswani tok/s | Marian (HF) tok/s | torch.nn.Transformer tok/s | vs faster peer "
        f"| vaswani MFU | matrix-product floor tok/s | floor vs faster peer |{extra}"
    )
    print("|---|---|---|---|---|---|---|---|" + "---|---|" * compiled)
    for bf16 in (False, True):
        if bf16 and device.type == "cpu" and (reason := bf16_emulated()):
            print(f"| bf16 autocast | skipped: {reason} |", flush=True)
            continue
        r = train_race(config, batches, steps, warmup, bf16, device, compiled)
        peer = max(r["Marian (HF)"], r["torch.nn.Transformer"])
        floor = r.get("matrix-product floor")
        fastest = max(r["vaswani"], r.get("vaswani compiled", 0.0))
        utilisation = mfu(fastest * r["FLOPs per token"], device, "bf16" if bf16 else "fp32")
        floors = f"{floor:,.0f} | {floor / peer:.2f}x" if floor else "— | —"
        more = f" {r['vaswani compiled']:,.0f} | {r['vaswani compiled'] / r['vaswani']:.2f}x |" if compiled else ""
        print(
            f"| {'bf16 autocast' if bf16 else 'fp32'} | {r['vaswani']:,.0f} | {r['Marian (HF)']:,.0f} | "
            f"{r['torch.nn.Transformer']:,.0f} | {fastest / peer:.2f}x | "
            f"{'—' if utilisation is None else f'{utilisation:.1%}'} | {floors} |{more}",
            flush=True,
        )
        hours = {name: tokens / fastest / 3600 for name, tokens in PAPER_RECIPES.items()}
        print(
            f"|   at this speed | the paper's base recipe (100k steps x 25k tokens): {hours['base']:,.1f} h; "
            f"big (300k steps, at this model's speed): {hours['big']:,.1f} h, on one {device.type} device "
            "(the paper: 12 h and 3.5 days on 8 P100s) |",
            flush=True,
        )


def decode_table(
    model_dir: Path,
    sources: list[list[int]],
    steps: int,
    batch_sizes: list[int],
    rounds: int,
    device: str = "cpu",
    decoders: tuple[str, ...] = DECODERS,
) -> None:
    names = [n for n in decoders if n != "vaswani"]
    versus = [n for n in ("CTranslate2 float32", "CTranslate2 float16") if n in decoders]
    print(
        f"\n| decoding ({steps} steps/sentence) | sentences | vaswani tok/s | "
        + "".join(f"{n} | " for n in names)
        + "".join(f"vaswani vs {n} | " for n in versus)
        + "matrix-product floor |"
    )
    print("|---|---|---|" + "---|" * (len(names) + len(versus) + 1))
    for batch_size in batch_sizes:
        subset = sources[: min(len(sources), 100 * batch_size)]  # at most 100 batches: small ones take long
        for bf16 in (False, True):
            if bf16 and device == "cpu" and (reason := bf16_emulated()):
                print(f"| batch {batch_size}, bf16 | skipped: {reason} |", flush=True)
                continue
            for beam in (1, 4):
                r = decode_race(model_dir, subset, beam, steps, batch_size, bf16, rounds, device, decoders)
                name = f"batch {batch_size}, {'greedy' if beam == 1 else f'beam {beam}'}, {'bf16' if bf16 else 'fp32'}"
                # bf16 rows: the CTranslate2 float32 column runs CTranslate2 in bfloat16, where it has it
                cell = {key: f"{r[key]:,.0f}" if key in r else "-" for key in (*decoders, "matrix-product floor")}
                ratios = "".join(f"{r['vaswani'] / r[n]:.2f}x | " if n in r else "- | " for n in versus)
                print(
                    f"| {name} | {len(subset)} | {cell['vaswani']} | "
                    + "".join(f"{cell[n]} | " for n in names)
                    + ratios
                    + f"{cell['matrix-product floor']} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
