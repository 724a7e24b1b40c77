import asyncio
import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.helpers.common import write_tiny_model_directory
from tests.helpers.server import start_server
from vaswani import __version__
from vaswani.serve.app import Settings, create_app
from vaswani.serve.batching import BusyError, MicroBatcher
from vaswani.serve.compute import ComputeThread
from vaswani.translate.document import split
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau.",
    "Ein kleines Mädchen in einem rosa Kleid klettert auf eine Treppe.",
    "Kinder lachen.",
    "Ein Hund rennt über die Wiese.",
    "Zwei Männer arbeiten.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    directory = write_tiny_model_directory(tmp_path_factory.mktemp("model"))
    rows = [
        {"step": 100, "epoch": 1, "train_loss": 5.0, "elapsed_s": 12.0},
        {"step": 100, "epoch": 1, "valid_loss": 4.5, "valid_bleu": 1.25},
    ]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.load(model_dir, "cpu", "fp32")


@pytest.fixture(scope="module")
def client(translator, model_dir):
    settings = Settings(
        max_texts=8,
        max_chars=200,
        max_text_chars=1000,
        max_body=4096,
        max_beam=8,
        max_attention_texts=2,
        max_batch_tokens=400,
    )
    with TestClient(create_app(translator, model_dir, settings)) as test_client:
        yield test_client


def test_health_model_and_page(client, translator):
    assert client.get("/health").json()["status"] == "ok"
    info = client.get("/v1/model").json()
    assert (info["source_language"], info["target_language"]) == ("de", "en")
    assert info["parameters"] == translator.model.num_parameters() and info["layers"] == 2 and info["heads"] == 2
    assert info["vocabulary"]["source"] == translator.tokenizer.src_vocab_size
    assert info["training"] == {"steps": 100, "epochs": 1, "elapsed_s": 12.0, "valid_loss": 4.5, "valid_bleu": 1.25}
    assert info["limits"]["max_texts"] == 8 and info["auth"] is False
    page = client.get("/")
    assert page.status_code == 200 and 'id="translate"' in page.text and "/static/app.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN: everything is served here
    for name in ("app.js", "style.css"):
        asset = client.get(f"/static/{name}")
        assert asset.status_code == 200 and asset.text
        assert "https://" not in asset.text
    assert "/v1/translate" in client.get("/openapi.json").json()["paths"]


def test_translations_in_order_equal_the_library(client, translator):
    response = client.post("/v1/translate", json={"text": SENTENCES, "beam": 3, "n_best": 2})
    assert response.status_code == 200, response.text
    got = response.json()["translations"]
    expected = translator.translate_with_details(SENTENCES, n_best=2, beam_size=3)
    assert [t["text"] for t in got] == [t.text for t in expected]
    assert got[1] == {
        "text": "", "score": 0.0, "log_prob": 0.0, "confidence": None, "truncated": False, "n_best": [], "sentences": []
    }  # fmt: skip
    assert 0 < got[0]["confidence"] <= 1 and got[0]["confidence"] == got[0]["sentences"][0]["confidence"]
    for t, e in zip(got, expected, strict=True):  # one sentence a text: its n-best is the text's
        assert [c["text"] for c in t["n_best"]] == [c.text for c in e.candidates]
        assert [c["score"] for c in t["n_best"]] == pytest.approx([c.score for c in e.candidates], abs=1e-3)


@pytest.mark.parametrize("split", [True, False])
def test_cross_attention_on_request(client, translator, split):
    response = client.post("/v1/translate", json={"text": [SENTENCES[0]], "attention": True, "split_sentences": split})
    [result] = response.json()["translations"]
    attention = result["sentences"][0]["attention"] if split else result["attention"]
    rows, columns = len(attention["target_pieces"]), len(attention["source_pieces"])
    assert attention["source_pieces"][-1] == "</s>" and attention["target_pieces"][-1] == "</s>"
    cross = attention["cross"]  # [layer][head][target][source]
    assert (len(cross), len(cross[0]), len(cross[0][0]), len(cross[0][0][0])) == (2, 2, rows, columns)
    assert all(abs(sum(row) - 1) < 1e-2 for layer in cross for head in layer for row in head)
    assert "attention" not in client.post("/v1/translate", json={"text": ["Hallo"]}).json()["translations"][0]
    direct = translator.attention(SENTENCES[0])
    assert attention["target_pieces"] == direct.tgt_pieces
    assert cross[1][0][0] == pytest.approx(direct.attention.cross[1][0][0].tolist(), abs=1e-4)


DOCUMENTS = [
    "  Ein Mann fährt Fahrrad. Zwei Hunde spielen im Schnee.\n\nEine Frau liest.  Kinder lachen\n",
    "Dr. Müller kam am 3. Oktober an.\r\nEr sagt: „Komm her.“",
    "Ein Hund rennt über die Wiese.",
]


@pytest.mark.slow
def test_a_document_keeps_its_layout_and_equals_line_mode_on_its_sentences(client, translator):
    response = client.post("/v1/translate", json={"text": DOCUMENTS, "beam": 2, "n_best": 2})
    assert response.status_code == 200, response.text
    got = response.json()["translations"]
    for text, result in zip(DOCUMENTS, got, strict=True):
        document = split(text, "de")
        lines = translator.translate(list(document.sentences), beam_size=2)
        assert result["text"] == document.join(lines)
        assert [s["source"] for s in result["sentences"]] == list(document.sentences)
        assert [s["text"] for s in result["sentences"]] == lines
        assert result["n_best"][0]["text"] == result["text"]
    assert got[0]["text"].startswith("  ") and "\n\n" in got[0]["text"] and got[0]["text"].endswith("\n")
    assert len(got[0]["sentences"]) == 4 and "\r\n" in got[1]["text"]
    # split_sentences false: the text goes to the model as one line, as before.
    whole = client.post("/v1/translate", json={"text": [DOCUMENTS[0]], "split_sentences": False}).json()
    [line] = translator.translate([DOCUMENTS[0]])
    assert whole["translations"][0]["text"] == line and "sentences" not in whole["translations"][0]
    # The splitting language on request: "xx", one pysbd lacks, goes to the fallback rules, which cut after "am 3.".
    rules = client.post("/v1/translate", json={"text": [DOCUMENTS[1]], "source_language": "xx"}).json()
    assert rules["translations"][0]["sentences"][0]["source"] == "Dr. Müller kam am 3."


def test_attention_for_each_sentence_of_a_document(client, translator):
    response = client.post("/v1/translate", json={"text": ["Ein Mann. Eine Frau liest."], "attention": True})
    assert response.status_code == 200, response.text
    sentences = response.json()["translations"][0]["sentences"]
    assert [s["source"] for s in sentences] == ["Ein Mann.", "Eine Frau liest."]
    for sentence in sentences:
        direct = translator.attention(sentence["source"])
        assert sentence["attention"]["source_pieces"] == direct.src_pieces
        assert sentence["attention"]["cross"][0][1][0] == pytest.approx(
            direct.attention.cross[0][1][0].tolist(), abs=1e-4
        )


def _metrics(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_in_the_prometheus_format_count_what_was_done(translator, model_dir):
    with TestClient(create_app(translator, model_dir, Settings(), load_seconds=1.5)) as fresh:
        assert fresh.post("/v1/translate", json={"text": ["Ein Mann. Eine Frau.", "Zwei Hunde."]}).status_code == 200
        assert fresh.post("/v1/translate", json={"text": "not a list"}).status_code == 422
        fresh.get("/health")
        response = fresh.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        samples = _metrics(response.text)
    route = "/v1/translate"
    assert samples[("vaswani_requests_total", (("route", route), ("status", "200")))] == 1
    assert samples[("vaswani_requests_total", (("route", route), ("status", "422")))] == 1
    assert samples[("vaswani_requests_total", (("route", "/health"), ("status", "200")))] == 1
    assert samples[("vaswani_sentences_translated_total", ())] == 3
    tokens = sum(len(ids) for ids in translator.encode_sources(["Ein Mann.", "Eine Frau.", "Zwei Hunde."]))
    assert samples[("vaswani_source_tokens_total", ())] == tokens
    assert samples[("vaswani_target_tokens_total", ())] > 0
    assert samples[("vaswani_request_duration_seconds_count", (("route", route),))] == 2
    assert samples[("vaswani_batch_sentences_sum", ())] == 3
    assert samples[("vaswani_queue_sentences", ())] == 0
    assert 1.5 <= samples[("vaswani_model_load_seconds", ())] < 60  # the loading given, and the app's start-up
    assert samples[("vaswani_model_info", (("name", model_dir.name), ("version", __version__)))] == 1


def test_metrics_are_guarded_by_the_api_key_or_their_own_token(translator, model_dir):
    with TestClient(create_app(translator, model_dir, Settings(api_key="s3cret"))) as guarded:
        assert guarded.get("/metrics").status_code == 401
        assert guarded.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    settings = Settings(api_key="s3cret", metrics_token="scrape")
    with TestClient(create_app(translator, model_dir, settings)) as guarded:
        refused = guarded.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert refused.status_code == 401 and "metrics token" in refused.json()["error"]
        assert guarded.get("/metrics", headers={"Authorization": "Bearer scrape"}).status_code == 200
        assert (
            guarded.post("/v1/translate", json={"text": ["x"]}, headers={"Authorization": "Bearer scrape"}).status_code
            == 401
        )


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_request_gets_the_same_result_alone_or_batched_with_others(translator, model_dir, precision):
    """int8 too: its activations are quantized row by row (nn/int8.py), so no other sentence sets a row's scale."""
    if precision == "int8":
        from vaswani.nn.cpu_linear.int8 import int8_available

        if int8_available() is not None:
            pytest.skip(int8_available())
        translator = Translator.load(model_dir, "cpu", "int8")

    async def run(batcher, groups, options):
        request = translator.request(**options)
        return await asyncio.gather(*(batcher.translate(texts, request=request) for texts in groups))

    groups = [SENTENCES[i : i + 1 + i % 3] for i in range(len(SENTENCES))]  # overlapping, of 1 to 3 sentences
    for options in ({"n_best": 2}, {"beam_size": 1}, {"attention": True}):
        together = MicroBatcher(translator, max_wait=0.5, max_tokens=10_000)
        batched = asyncio.run(run(together, groups, options))
        together.close()
        searched = sum(1 for texts in groups for text in texts if text.strip())  # an empty line needs no search
        assert together.stats.batches == 1 and together.stats.largest == searched
        alone = MicroBatcher(translator, max_wait=0.0, max_sentences=1)
        single = [asyncio.run(run(alone, [texts], options))[0] for texts in groups]
        alone.close()
        assert alone.stats.largest == 1 and alone.stats.sentences == searched  # each sentence alone
        for b, s in zip(batched, single, strict=True):
            # The same outputs; the scores agree to float rounding (matrix products of other shapes).
            assert [[(c.text, c.tokens) for c in t.candidates] for t in b] == [
                [(c.text, c.tokens) for c in t.candidates] for t in s
            ]
            for tb, ts in zip(b, s, strict=True):
                assert [c.log_prob for c in tb.candidates] == pytest.approx(
                    [c.log_prob for c in ts.candidates], abs=1e-4
                )
                if tb.attention is not None:  # int8 on oneDNN: its one-row kernel rounds the last bit apart
                    same = (lambda x, y: x.equal(y)) if precision == "fp32" else (lambda x, y: x.allclose(y, atol=1e-5))
                    assert all(same(x, y) for x, y in zip(tb.attention.cross, ts.attention.cross, strict=True))


def test_the_model_is_loaded_measured_and_run_on_one_compute_thread(model_dir, monkeypatch):
    """serve/compute.py's ComputeThread: torch runs markedly slower on a thread other than the one that loaded the
    model (docs/benchmarks.md, "Serving"), so the service loads, measures and decodes on one thread."""
    compute = ComputeThread("test-compute")
    translator = compute.call(Translator.load, model_dir, "cpu", "auto")
    seen = []

    def recorded(name, original):
        def record(*args, **kwargs):
            seen.append((name, threading.current_thread().name))
            return original(*args, **kwargs)

        return record

    # precision is settled at start-up by the translator's engine (Engine.prepare)
    engine = translator.engine
    monkeypatch.setattr(engine, "choose_precision", recorded("choose", engine.choose_precision))
    monkeypatch.setattr(translator, "finish", recorded("translate", translator.finish))  # what every batching calls
    with TestClient(create_app(translator, model_dir, Settings(), compute=compute)) as client:
        assert client.post("/v1/translate", json={"text": ["Ein Mann. Eine Frau."]}).status_code == 200
    assert seen[0] == ("choose", "test-compute") and ("translate", "test-compute") in seen
    assert {thread for _, thread in seen} == {"test-compute"}
    with pytest.raises(ZeroDivisionError):  # a call's exception reaches its caller; the thread goes on
        compute.call(lambda: 1 / 0)
    assert compute.call(lambda: threading.current_thread().name) == "test-compute"
    compute.close()
    compute.thread.join(5)
    assert not compute.thread.is_alive()


def test_a_server_s_precision_auto_is_fp32_and_measures_nothing(model_dir, monkeypatch):
    from vaswani.runtime import precision

    monkeypatch.setattr(precision, "measure_matmuls", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    translator = Translator.load(model_dir, "cpu", "auto")
    with TestClient(create_app(translator, model_dir, Settings())) as client:
        assert client.post("/v1/translate", json={"text": SENTENCES[:2]}).status_code == 200
    assert translator.choose_precision(translator.request()).precision == "fp32"


def test_the_batcher_never_mixes_options_and_respects_its_budget(translator):
    async def run(batcher):
        calls = [
            batcher.translate([s], request=translator.request(beam_size=1 + i % 2)) for i, s in enumerate(SENTENCES)
        ]
        return await asyncio.gather(*calls)

    batcher = MicroBatcher(translator, max_wait=0.3, max_tokens=10_000, max_sentences=3)
    results = asyncio.run(run(batcher))
    batcher.close()
    assert batcher.stats.largest <= 3 and batcher.stats.batches >= 4  # 4 beam-1, 4 beam-2 sentences
    for i, (sentence, [result]) in enumerate(zip(SENTENCES, results, strict=True)):
        assert result.text == translator.translate([sentence], beam_size=1 + i % 2)[0]


def test_a_long_document_shares_each_batch_with_the_short_requests_after_it(translator):
    document = [SENTENCES[i % len(SENTENCES)] for i in range(40)]
    order = []

    async def run(batcher):
        async def one(name, texts):
            result = await batcher.translate(texts)
            order.append(name)
            return result

        long = asyncio.ensure_future(one("document", document))
        await asyncio.sleep(0.01)
        shorts = [asyncio.ensure_future(one(f"short {i}", [s])) for i, s in enumerate(SENTENCES[:3])]
        return await long, await asyncio.gather(*shorts)

    batcher = MicroBatcher(translator, max_wait=0.1, max_sentences=8)
    long, shorts = asyncio.run(run(batcher))
    batcher.close()
    assert batcher.stats.largest <= 8 and order[-1] == "document"  # the short ones answered first, not after it
    assert [t.text for t in long] == translator.translate(document)  # its sentences 8 at a time at most, in order
    assert [r[0].text for r in shorts] == translator.translate(SENTENCES[:3])


def test_a_request_whose_client_went_away_is_not_decoded(translator):
    async def run(batcher):
        gone = asyncio.ensure_future(batcher.translate(SENTENCES * 5))
        await asyncio.sleep(0.01)
        gone.cancel()  # as the server's handler is cancelled when its client disconnects
        return await batcher.translate(SENTENCES[:1])

    batcher = MicroBatcher(translator, max_wait=0.2)
    [result] = asyncio.run(run(batcher))
    batcher.close()
    assert result.text == translator.translate(SENTENCES[:1])[0]
    assert batcher.stats.sentences == 1 and batcher.queued == 0  # none of the cancelled request's sentences


def _slow_steps(translator, monkeypatch, seconds: float) -> None:
    """Every step of the translator's continuous batches slowed by `seconds`, so that a test's requests come while
    one runs."""
    start = translator.continuous

    def slow(request):
        search = start(request)
        step = search.step
        search.step = lambda: (time.sleep(seconds), step())[1]
        return search

    monkeypatch.setattr(translator, "continuous", slow)


def test_a_client_gone_while_its_sentences_run_frees_their_rows(translator, monkeypatch):
    """All of its sentences in the continuous batch when its client goes (each step slowed to 50 ms): they leave at
    the next step, the next request is answered as alone."""
    _slow_steps(translator, monkeypatch, 0.05)

    async def run(batcher):
        gone = asyncio.ensure_future(batcher.translate(SENTENCES * 5))
        await asyncio.sleep(0.03)  # within its first step: every sentence of it joined
        gone.cancel()
        return await batcher.translate(SENTENCES[:1])

    batcher = MicroBatcher(translator, max_wait=0.0)
    [result] = asyncio.run(run(batcher))
    batcher.close()
    assert result.text == translator.translate(SENTENCES[:1])[0]
    searched = sum(1 for sentence in SENTENCES * 5 if sentence.strip())  # an empty one needs no search
    assert batcher.stats.largest >= searched  # they were all running
    assert batcher.stats.sentences < 1 + searched  # not all of them decoded to their end


BAD_REQUESTS = [  # (what, request keyword arguments, status, words the error must contain)
    ("invalid JSON", {"content": b'{"text": ["a"', "headers": {"content-type": "application/json"}}, 422, "JSON"),
    (
        "invalid UTF-8",
        {"content": b'{"text": ["\xff\xfe"]}', "headers": {"content-type": "application/json"}},
        400,
        "UTF-8",
    ),
    (
        "a lone surrogate",
        {"content": b'{"text": ["\\ud800"]}', "headers": {"content-type": "application/json"}},
        422,
        "surrogate",
    ),
    ("no body", {}, 422, "no request body"),
    ("a string, not a list", {"json": {"text": "Hallo"}}, 422, "text"),
    ("an empty list", {"json": {"text": []}}, 422, "text"),
    ("a number in the list", {"json": {"text": ["a", 3]}}, 422, "text.1"),
    ("too many texts", {"json": {"text": ["a"] * 9}}, 422, "text"),
    ("a sentence too long", {"json": {"text": ["a" * 201]}}, 422, "sentence 1 of the request has 201 characters"),
    ("a NUL byte", {"json": {"text": ["a\x00b"]}}, 422, "NUL"),
    ("beam 0", {"json": {"text": ["a"], "beam": 0}}, 422, "beam"),
    ("beam too large", {"json": {"text": ["a"], "beam": 9}}, 422, "beam"),
    ("beam as a string", {"json": {"text": ["a"], "beam": "4"}}, 422, "beam"),
    ("n_best above the beam", {"json": {"text": ["a"], "beam": 2, "n_best": 3}}, 422, "n_best"),
    ("attention not a boolean", {"json": {"text": ["a"], "attention": "yes"}}, 422, "attention"),
    (
        "attention for too many texts",
        {"json": {"text": ["a", "b", "c"], "attention": True}},
        422,
        "at most 2 sentences",
    ),
    (
        "attention for too many sentences after splitting",
        {"json": {"text": ["Ein Hund. Eine Katze. Ein Haus."], "attention": True}},
        422,
        "at most 2 sentences per request, got 3",
    ),
    ("too many sentences after splitting", {"json": {"text": ["Ein Hund. Eine Katze. " * 5]}}, 422, "10 sentences"),
    (
        "a text too long without splitting",
        {"json": {"text": ["a" * 201], "split_sentences": False}},
        422,
        "text[0] has 201 characters",
    ),
    ("a document too long", {"json": {"text": ["Ein Hund. " * 101]}}, 422, "1010 characters, more than the 1000"),
    ("a language that is not a code", {"json": {"text": ["a"], "source_language": "German"}}, 422, "source_language"),
    ("too many tokens in all", {"json": {"text": ["qxz jvw " * 24] * 8}}, 422, "source tokens"),
    ("a boolean beam", {"json": {"text": ["a"], "beam": True}}, 422, "beam"),
    ("a huge beam", {"json": {"text": ["a"], "beam": 10**30}}, 422, "beam"),
    (
        "an infinite n_best",
        {"content": b'{"text": ["a"], "n_best": 1e400}', "headers": {"content-type": "application/json"}},
        422,
        "n_best",
    ),
    ("an unknown field", {"json": {"text": ["a"], "bean": 4}}, 422, "bean"),
    ("a body over the limit", {"json": {"text": ["a" * 150] * 30}}, 413, "bytes"),
    ("a Content-Length that is not a number", {"content": b"{}", "headers": {"content-length": "x"}}, 400, "Length"),
]


@pytest.mark.parametrize(("what", "request_args", "status", "words"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_a_4xx_with_a_one_line_json_error(client, what, request_args, status, words):
    response = client.post("/v1/translate", **request_args)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error and "\n" not in error
    assert client.get("/health").status_code == 200


def test_a_chunked_body_over_the_limit_is_refused_as_it_streams(client):
    def chunks():
        yield b'{"text": ["'
        for _ in range(10):
            yield b"a" * 1000
        yield b'"]}'

    response = client.post("/v1/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "bytes" in response.json()["error"]


def test_a_failing_request_fails_alone_and_the_server_goes_on(translator, model_dir, monkeypatch):
    real, prepare = translator.translate_with_details, translator.prepare

    def failing(texts, *args, **options):  # what both batchings call (a continuous one, and translate_with_details)
        if any("BOOM" in text for text in texts):
            raise RuntimeError("a failure of ours")
        return prepare(texts, *args, **options)

    monkeypatch.setattr(translator, "prepare", failing)

    async def run(batcher):
        texts = [["Ein Hund."], ["BOOM"], ["Zwei Katzen."]]
        return await asyncio.gather(*(batcher.translate(t) for t in texts), return_exceptions=True)

    batcher = MicroBatcher(translator, max_wait=0.3)
    good, bad, other = asyncio.run(run(batcher))
    batcher.close()
    assert isinstance(bad, RuntimeError) and str(bad) == "a failure of ours"
    assert [good[0].text, other[0].text] == [t.text for t in real(["Ein Hund.", "Zwei Katzen."])]
    with TestClient(create_app(translator, model_dir), raise_server_exceptions=False) as client:
        response = client.post("/v1/translate", json={"text": ["BOOM"]})
        assert response.status_code == 500 and response.json()["error"].startswith("internal error (RuntimeError)")
        assert client.get("/health").json()["status"] == "ok"
        assert client.post("/v1/translate", json={"text": ["Ein Hund."]}).status_code == 200


def test_a_full_queue_answers_503_with_retry_after(translator):
    async def run(batcher):
        first = asyncio.ensure_future(batcher.translate(["Ein Hund.", "Eine Katze."]))
        await asyncio.sleep(0.05)
        with pytest.raises(BusyError, match="more than 3 sentences are waiting"):
            await batcher.translate(["Zwei Hunde.", "Drei Hunde."])
        return await first

    batcher = MicroBatcher(translator, max_wait=0.5, max_queued=3)
    assert [t.text for t in asyncio.run(run(batcher))] == translator.translate(["Ein Hund.", "Eine Katze."])
    batcher.close()
    assert not batcher.alive
    with pytest.raises(BusyError, match="stopped"):
        asyncio.run(batcher.translate(["Ein Hund."]))


def test_wrong_paths_and_methods_are_json_4xx(client):
    assert client.get("/v1/translate").status_code == 405
    missing = client.get("/v2/nothing")
    assert missing.status_code == 404 and missing.json()["error"].startswith('"/v2/nothing": no such page')


def test_an_api_key_guards_the_api_and_cors_is_off_unless_configured(translator, model_dir):
    with TestClient(create_app(translator, model_dir, Settings(api_key="s3cret"))) as guarded:
        assert guarded.get("/health").status_code == 200
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "s3cret"},
            {"Authorization": "Bearer s3cret\u00e9".encode()},
        ):  # non-ASCII bytes: still a 401
            response = guarded.post("/v1/translate", json={"text": ["Hallo"]}, headers=headers)
            assert response.status_code == 401 and "API key" in response.json()["error"]
            assert response.headers["www-authenticate"] == "Bearer"
        assert guarded.get("/v1/model").status_code == 401
        assert guarded.post("/v1/translate", content=b"{not json").status_code == 401  # before reading the body
        ok = guarded.post("/v1/translate", json={"text": ["Hallo"]}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert guarded.get("/v1/model", headers={"Authorization": "bearer s3cret"}).status_code == 200
        assert guarded.get("/v1/model", headers={"Authorization": "Bearer s3cret"}).json()["auth"] is True
        preflight = {"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"}
        assert "access-control-allow-origin" not in guarded.options("/v1/translate", headers=preflight).headers
    settings = Settings(cors_origins=("https://elsewhere.example",))
    with TestClient(create_app(translator, model_dir, settings)) as open_client:
        response = open_client.options("/v1/translate", headers=preflight)
        assert response.headers["access-control-allow-origin"] == "https://elsewhere.example"


@pytest.mark.slow
def test_the_server_batches_concurrent_clients_and_finishes_requests_in_flight_when_stopped(model_dir):
    # A long batching wait keeps requests in flight long enough to stop the server under them.
    server = start_server(model_dir, "--max-wait-ms", "3000")
    process, url = server.process, server.url
    try:
        results: dict[int, httpx.Response] = {}

        def client(i: int) -> None:
            results[i] = httpx.post(f"{url}/v1/translate", json={"text": [SENTENCES[i]]}, timeout=30)

        def clients(stop: bool) -> None:
            results.clear()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(len(SENTENCES))]
            for thread in threads:
                thread.start()
            if stop:  # once every request is queued (and waiting for the others), not before
                deadline = time.monotonic() + 2.5
                while httpx.get(f"{url}/health").json()["queued_sentences"] < len([s for s in SENTENCES if s]):
                    assert time.monotonic() < deadline, "the requests did not all arrive"
                    time.sleep(0.02)
                process.send_signal(signal.SIGTERM)
            for thread in threads:
                thread.join(30)

        clients(stop=False)
        health = httpx.get(f"{url}/health").json()
        # decoded together (the empty text has no sentence: it never reaches the model)
        assert health["requests"] == len(SENTENCES) - 1 and health["batches"] < len(SENTENCES) - 1
        clients(stop=True)
        assert sorted(results) == list(range(len(SENTENCES)))
        assert all(r.status_code == 200 for r in results.values())
        translator = Translator.load(model_dir, "cpu", "fp32")
        assert [results[i].json()["translations"][0]["text"] for i in range(len(SENTENCES))] == translator.translate(
            SENTENCES
        )
        assert process.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
        output = server.output()
        assert "serving" in output and "Application shutdown complete" in output and "Traceback" not in output
    finally:
        server.stop()


@pytest.mark.slow
def test_serve_binds_to_this_machine_only_by_default(model_dir):
    with start_server(model_dir) as server:
        assert server.url.startswith("http://127.0.0.1:")
        port = int(server.url.rsplit(":", 1)[1])
        addresses = {
            line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:] if line.split()[3] == "0A"
        }  # listening sockets: local address in hex
        assert f"0100007F:{port:04X}" in addresses and f"00000000:{port:04X}" not in addresses


def test_requests_that_come_while_a_batch_runs_join_it_and_get_what_they_get_alone(translator, monkeypatch):
    """Continuous batching (serve/continuous.py): each request's sentence joins the running search at its next step
    (every step slowed to 20 ms, so that the batch is still running when the next request comes, 5 ms later)."""
    _slow_steps(translator, monkeypatch, 0.02)

    async def run(batcher, request):
        calls = []
        for sentence in SENTENCES:
            calls.append(asyncio.ensure_future(batcher.translate([sentence], request=request)))
            await asyncio.sleep(0.005)
        return await asyncio.gather(*calls)

    for options in ({"beam_size": 4}, {"beam_size": 1}):
        request = translator.request(**options)
        batcher = MicroBatcher(translator, max_wait=0.0)
        results = asyncio.run(run(batcher, request))
        batcher.close()
        assert batcher.stats.batches == 1 and batcher.stats.largest >= 3  # one running batch that they joined
        assert [r[0].text for r in results] == translator.translate(SENTENCES, **options)
