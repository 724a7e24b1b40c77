"""How often vaswani's translation of an imported Marian model equals transformers' generate, on the hub's layouts.

    python benchmarks/generate_agreement.py [--lines 200] [--work /tmp/agreement]

Builds small MarianMTModels offline as the hub lays them out (tests/pretrained/hf_models.py): OPUS-MT's (tied,
generation_config.json), an older upload (pytorch_model.bin with every tied name and the sinusoid tables, its
settings in config.json, num_beams 6), and a shared input embedding with an lm_head of its own
(tie_word_embeddings false); imports each and counts the Multi30k validation lines whose greedy and default
(the checkpoint's num_beams) translations equal generate's. Refusals are printed as such. Results:
docs/benchmarks.md, "Quality".
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYOUTS = {
    "OPUS-MT (tied, generation_config.json)": dict(steps=400),
    "older upload (.bin, settings in config.json, num_beams 6)": dict(
        steps=300, legacy=True, generation={"num_beams": 6}
    ),
    "shared input embedding, lm_head of its own": dict(steps=300, tie_output=False),
}


def main() -> None:
    import transformers

    from tests.helpers.hf_models import multi30k, save_marian
    from vaswani.pretrained import PretrainedError, import_pretrained
    from vaswani.translate.translator import Translator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--work", default="/tmp/agreement")
    args = parser.parse_args()
    lines, root = multi30k("val", "de", args.lines), Path(args.work)
    for i, (name, layout) in enumerate(LAYOUTS.items()):
        src, out = root / f"hf{i}", root / f"model{i}"
        if not src.exists():
            save_marian(src, **layout)
        shutil.rmtree(out, ignore_errors=True)
        try:
            import_pretrained(src, out)
        except PretrainedError as error:
            print(f"{name}: refused: {error}")
            continue
        hf = transformers.MarianMTModel.from_pretrained(str(src)).eval()
        tokenizer = transformers.MarianTokenizer.from_pretrained(str(src))
        batch = tokenizer(lines, return_tensors="pt", padding=True)
        with torch.no_grad():
            greedy = tokenizer.batch_decode(hf.generate(**batch, num_beams=1), skip_special_tokens=True)
            beam = tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)
        translator = Translator.load(out, "cpu")
        ours_greedy, ours = translator.translate(lines, beam_size=1), translator.translate(lines)
        same = lambda a, b: sum(x == y for x, y in zip(a, b, strict=True))  # noqa: E731
        print(
            f"{name}: greedy {same(ours_greedy, greedy)}/{len(lines)}, default (beam "
            f"{hf.generation_config.num_beams}) {same(ours, beam)}/{len(lines)}"
        )


if __name__ == "__main__":
    main()
