"""The web page in a real headless Chromium (Debian's `chromium`, driven by Playwright).

Skipped, saying why, where no Chromium or Playwright is installed (`apt-get install chromium`,
`pip install playwright`). The screenshot goes to $VASWANI_SCREENSHOTS (a directory) if set, else tmp_path.
"""

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.helpers.common import write_tiny_model_directory
from tests.helpers.server import start_server

CHROMIUM = next(
    (path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None
)
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright to test the page")
pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.slow,  # a browser
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: apt-get install chromium to test the page"),
]

SENTENCE = "Ein Mann fährt Fahrrad."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = write_tiny_model_directory(tmp_path_factory.mktemp("model"), max_len_b=8)
    with start_server(model_dir) as server:
        yield server.url


def test_type_a_sentence_get_the_translation_and_its_heatmap(server, tmp_path):
    messages, errors = [], []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=2)
        page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server + "/")
        page.wait_for_function("document.getElementById('model-info').textContent.includes('de')")
        page.fill("#source", SENTENCE)
        page.fill("#nbest", "3")
        page.click("#translate")
        page.wait_for_selector('#heatmap[data-drawn="true"]', timeout=30_000)

        expected = httpx.post(
            f"{server}/v1/translate", json={"text": [SENTENCE], "n_best": 3, "attention": True}
        ).json()["translations"][0]
        assert page.inner_text("#translation").strip() == expected["text"].strip()
        assert page.locator("#alternatives li").count() == len(expected["n_best"]) == 3
        canvas = page.locator("#heatmap")
        rows, cols = int(canvas.get_attribute("data-rows")), int(canvas.get_attribute("data-cols"))
        attention = expected["sentences"][0]["attention"]
        assert (rows, cols) == (len(attention["target_pieces"]), len(attention["source_pieces"]))

        # Hover the cell (second target piece, first source piece): the tooltip names both and the weight.
        left, top, cell = (float(canvas.get_attribute(f"data-{k}")) for k in ("left", "top", "cell"))
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        page.mouse.move(box["x"] + left + cell * 0.5, box["y"] + top + cell * 1.5)
        tooltip = page.locator("#tooltip")
        tooltip.wait_for(state="visible")
        heads = attention["cross"][-1]  # the page shows the last layer, heads averaged, by default
        weight = sum(head[1][0] for head in heads) / len(heads)
        text = tooltip.inner_text()
        assert attention["target_pieces"][1] in text and attention["source_pieces"][0] in text
        assert f"{weight:.3f}" in text

        # Another layer and head redraw without a request.
        page.select_option("#layer", "1")
        page.select_option("#head", "2")
        assert "layer 1, head 2" in canvas.get_attribute("aria-label")

        shots = Path(os.environ.get("VASWANI_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        page.mouse.move(box["x"] + left + cell * 2.5, box["y"] + top + cell * 1.5)
        page.screenshot(path=str(shots / "serve_page.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert not [m for m in messages if m.startswith(("error", "warning"))], messages


PARAGRAPHS = "Ein Mann fährt Fahrrad. Zwei Hunde spielen im Schnee.\n\nEine Frau liest ein Buch.\nKinder lachen."


def test_a_pasted_text_comes_back_with_its_paragraphs_and_attention_per_sentence(server):
    errors = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server + "/")
        page.wait_for_function("document.getElementById('model-info').textContent.includes('de')")
        assert page.get_attribute("#source", "maxlength") == "20000"  # a whole text, not one sentence
        assert page.locator("#sentence-field").is_hidden()
        page.fill("#source", PARAGRAPHS)
        page.click("#translate")
        page.wait_for_selector('#heatmap[data-drawn="true"]', timeout=30_000)
        expected = httpx.post(f"{server}/v1/translate", json={"text": [PARAGRAPHS], "attention": True}).json()
        [translation] = expected["translations"]
        assert translation["text"].count("\n\n") == 1 and translation["text"].count("\n") == 3
        assert page.inner_text("#translation") == translation["text"]  # paragraphs and line breaks shown

        # One heatmap per sentence: picking the third shows its own pieces.
        assert page.locator("#sentence-field").is_visible()
        assert page.locator("#sentence option").count() == len(translation["sentences"]) == 4
        assert "Eine Frau liest ein Buch." in page.locator("#sentence option").nth(2).inner_text()
        page.select_option("#sentence", "2")
        third = translation["sentences"][2]["attention"]
        canvas = page.locator("#heatmap")
        rows, cols = int(canvas.get_attribute("data-rows")), int(canvas.get_attribute("data-cols"))
        assert (rows, cols) == (len(third["target_pieces"]), len(third["source_pieces"]))

        # More sentences than the server draws attention for: translated all the same, without a heatmap.
        many = " ".join(["Ein Hund rennt."] * 9)
        page.fill("#source", many)
        page.click("#translate")
        page.wait_for_function("document.getElementById('hint').textContent.includes('Attention is shown')")
        assert page.locator("#attention").is_hidden()
        assert page.inner_text("#translation").strip()
        browser.close()
    assert not errors, errors


def _loaded_page(p, server: str, sent: list):
    """The browser and its page, loaded (the model's line filled in), every /v1/translate request's body put in
    `sent` (None for a request without one)."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    page = browser.new_page()
    page.on("request", lambda r: sent.append(r.post_data_json) if "/v1/translate" in r.url else None)
    page.goto(server + "/")
    page.wait_for_function("document.getElementById('model-info').textContent.length > 0")
    return browser, page


def test_an_empty_source_is_not_sent_and_an_error_is_shown_in_the_page(server):
    with playwright_api.sync_playwright() as p:
        requests = []
        browser, page = _loaded_page(p, server, requests)
        page.click("#translate")
        assert page.locator("#hint").is_visible() and not requests
        page.fill("#source", "a\u0000b")  # refused by the server (NUL): the page shows its message
        page.click("#translate")
        page.locator("#error").wait_for(state="visible")
        assert "NUL" in page.inner_text("#error")
        browser.close()


def test_a_glossary_typed_in_the_page_puts_its_terms_in_the_translation(server):
    with playwright_api.sync_playwright() as p:
        bodies = []
        browser, page = _loaded_page(p, server, bodies)
        page.click("#glossary-box summary")
        page.fill("#glossary", "Mann = gentleman\n\nFahrrad\tvelocipede")
        page.fill("#source", SENTENCE)
        page.click("#translate")
        page.wait_for_function("document.getElementById('translation').textContent.includes('gentleman')")
        text = page.inner_text("#translation")
        assert "gentleman" in text and "velocipede" in text
        assert bodies[-1]["glossary"] == [["Mann", "gentleman"], ["Fahrrad", "velocipede"]]
        page.fill("#glossary", "Mann gentleman")  # neither a tab nor "=": said in the page, nothing sent
        sent = len(bodies)
        page.click("#translate")
        page.locator("#error").wait_for(state="visible")
        assert "Glossary line 1" in page.inner_text("#error") and len(bodies) == sent
        # HTML in, HTML out: the tags stay as written, shown as the markup it is
        page.fill("#glossary", "")
        page.select_option("#format", "html")
        page.fill("#source", '<p>Ein <b>Mann</b> fährt <a href="/x">Fahrrad</a>.</p>')
        page.click("#translate")
        page.wait_for_function("document.getElementById('translation').textContent.includes('</a>')")
        text = page.inner_text("#translation")
        assert bodies[-1]["format"] == "html" and text.startswith("<p>") and text.count('<a href="/x">') == 1
        browser.close()


def test_a_file_chosen_in_the_page_comes_back_as_a_download_the_server_s_own_translation(server, tmp_path):
    from tests.helpers.files import SRT

    source = tmp_path / "talk.srt"
    source.write_text(SRT, encoding="utf-8")
    expected = httpx.post(f"{server}/v1/translate_file", files={"file": ("talk.srt", SRT.encode(), "text/plain")})
    assert expected.status_code == 200, expected.text
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server + "/")
        page.wait_for_function("document.getElementById('model-info').textContent.length > 0")
        page.click("#translate-file")  # no file chosen: said in the page, nothing sent
        assert "Choose a file" in page.inner_text("#file-status")
        page.set_input_files("#file", str(source))
        page.click("#translate-file")
        page.locator("#download").wait_for(state="visible", timeout=30_000)
        with page.expect_download() as download:
            page.click("#download")
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
        assert saved.name == "talk.en.srt" and saved.read_bytes() == expected.content
        page.set_input_files("#file", {"name": "broken.docx", "mimeType": "x/y", "buffer": b"PK\x03\x04cut"})
        page.click("#translate-file")
        page.locator("#error").wait_for(state="visible")
        assert "broken.docx: cannot be read" in page.inner_text("#error") and page.locator("#download").is_hidden()
        browser.close()
    assert not errors, errors


def test_sentences_under_the_flag_threshold_are_shaded_and_the_text_kept(server):
    sent = []
    with playwright_api.sync_playwright() as p:
        browser, page = _loaded_page(p, server, sent)
        page.fill("#source", PARAGRAPHS)
        body = {"text": [PARAGRAPHS], "attention": True}
        [translation] = httpx.post(f"{server}/v1/translate", json=body).json()["translations"]
        confidences = sorted(s["confidence"] for s in translation["sentences"])
        threshold = (confidences[1] + confidences[2]) / 2  # the two least sure sentences under it
        page.fill("#min-confidence", f"{threshold:.6f}")
        page.click("#translate")
        page.wait_for_function("document.getElementById('translation').textContent.length > 0")
        page.wait_for_function("!document.getElementById('translate').disabled")
        assert sent[-1]["min_confidence"] == pytest.approx(threshold, abs=1e-6)
        shaded = page.locator("#translation mark.low-confidence")
        low = [s["text"] for s in translation["sentences"] if s["confidence"] < threshold]
        assert shaded.count() == len(low) == 2 and [shaded.nth(i).inner_text() for i in range(2)] == low
        assert page.inner_text("#translation") == translation["text"]  # shading changes no character
        page.fill("#min-confidence", "0")  # nothing flagged, nothing asked
        page.click("#translate")
        page.wait_for_function("!document.getElementById('translate').disabled")
        assert "min_confidence" not in sent[-1] and shaded.count() == 0
        browser.close()
