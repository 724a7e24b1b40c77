"""Every input surface fuzzed at scale (issue 60): ≥ 10,000 generated inputs per surface through the checks the suite
runs a few hundred of (tests/fuzz/), with a new seed each run, and the counts written down; then broken HTML as a
browser reads it: the text our parser keeps untranslated against the text an HTML5 parser (html5lib, the WHATWG
rules browsers follow) puts inside the elements kept as written, on fuzzed pages and on real pages' broken markup.

    python benchmarks/fuzz.py                          # all surfaces, 10,000 each (benchmarks/results/fuzz/)
    python benchmarks/fuzz.py --examples 500 --surfaces markup_html glossary
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import provenance

from tests.fuzz import run_surface
from tests.fuzz.catalog import NAMES, surfaces
from tests.helpers.browser import REAL_PAGES, browser_kept, ours_kept
from vaswani.runtime.machine import cpu_name

RESULTS = Path(__file__).parent / "results" / "fuzz"


def compare_with_browser(pages: list[str]) -> dict:
    """Pages whose kept text, and whose text to translate (block by block), equal what html5lib (a browser's
    parsing rules) reads; how many were rewritten as a browser reads them; characters kept by one and not the other."""
    from vaswani.translate.markup import parse
    from vaswani.translate.markup.html5 import REWRITTEN, browser_reading, our_reading, tree

    same = same_runs = rewritten = ours_more = browser_more = 0
    for page in pages:
        ours, theirs = ours_kept(page), browser_kept(page)
        markup = parse(page, "html")
        same += ours == theirs
        same_runs += our_reading(markup.parts).runs == browser_reading(tree(page)[0]).runs
        rewritten += any(note.endswith(REWRITTEN) for note in markup.kept)
        ours_more += max(0, len(ours) - len(theirs))
        browser_more += max(0, len(theirs) - len(ours))
    return {
        "pages": len(pages),
        "same_kept_text": same,
        "same_text_to_translate": same_runs,
        "rewritten_as_a_browser_reads_them": rewritten,
        "chars_we_keep_more": ours_more,
        "chars_browser_keeps_more": browser_more,
    }


def fuzzed_pages(count: int) -> list[str]:
    from hypothesis import HealthCheck, given, settings

    from tests.fuzz.markup_html import PAGES

    pages: list[str] = []

    @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(PAGES)
    def collect(page: str) -> None:
        pages.append(page)

    collect()
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000, help="generated inputs per surface")
    parser.add_argument("--surfaces", nargs="*", choices=NAMES, default=list(NAMES))
    parser.add_argument("--browser", action="store_true", help="only the comparison with html5lib")
    parser.add_argument("--out", type=Path, default=RESULTS, help="a folder: one JSON file per surface")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": cpu_name(), "commit": provenance.commit(), "date": time.strftime("%Y-%m-%d")}
    for surface in [] if args.browser else surfaces():
        if surface.name in args.surfaces:
            path = args.out / f"{surface.name}.json"

            def save(counts: dict, name: str = surface.name, path: Path = path) -> None:  # after every chunk
                row = {**machine, "examples": args.examples, **counts}
                path.write_text(json.dumps(row, indent=1, ensure_ascii=False) + "\n")
                print(f"{name:16} {json.dumps(counts, ensure_ascii=False)[:300]}", flush=True)

            _fuzz(surface, args.examples, save)
    if not args.browser and "markup_html" not in args.surfaces:
        return
    browser = {
        "fuzzed": compare_with_browser(fuzzed_pages(min(args.examples, 2000))),
        "real": compare_with_browser(REAL_PAGES),
    }
    (args.out / "browser.json").write_text(json.dumps({**machine, **browser}, indent=1) + "\n")
    print("kept text against html5lib:", json.dumps(browser))


def _fuzz(surface, examples: int, save, chunk: int = 1000) -> None:
    """One surface's run, in chunks of `chunk` inputs with a new seed each: its outcomes counted, and each broken
    promise (Hypothesis's shrunk example and the error, to fix) recorded, the run going on with the next chunk;
    `save(counts)` after each chunk, so that a run cut short still says what it ran."""
    start, outcomes, failures = time.perf_counter(), Counter(), []
    for _ in range(0, examples, chunk):
        try:
            outcomes.update(run_surface(surface, chunk, seed=None).outcomes)
        except Exception as error:  # its message, where it was raised, and Hypothesis's shrunk example
            notes = "\n".join(getattr(error, "__notes__", []))
            where = "".join(traceback.format_tb(error.__traceback__)[-3:])
            failures.append({"error": f"{type(error).__name__}: {error}"[:1000], "where": where[-1500:],
                             "example": notes[:4000]})  # fmt: skip
        seconds = round(time.perf_counter() - start)
        save({"cases": sum(outcomes.values()), "outcomes": dict(outcomes), "failures": len(failures),
              "errors": failures, "seconds": seconds})  # fmt: skip


if __name__ == "__main__":
    main()
