"""What the http_api fuzz surface (tests/fuzz/http_api.py, issue 60) found, kept as regression cases: each input
got a 500, a 200 it should not have, or an error of several lines or naming nothing; now a 4xx whose one-line
`error` names the field (or the body, the header, the path) and the fix."""

import json
import math

import pytest
from fastapi.testclient import TestClient

from tests.helpers.common import write_tiny_model_directory
from vaswani.serve.app import Settings, create_app
from vaswani.serve.routes import FiniteJSONResponse
from vaswani.translate.translator import Translator

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

JSON = {"content-type": "application/json"}
FOUND = [  # (what it did before, request keyword arguments, status, words the error must contain)
    ("500: NaN scores", {"json": {"text": ["Hallo"], "repetition_penalty": 1e-300}}, 422, "repetition_penalty"),
    (
        "500: a lone surrogate in a glossary term",
        {"content": b'{"text": ["a"], "glossary": [["a", "\\ud800"]]}', "headers": JSON},
        422,
        "glossary[0][1] is not valid Unicode",
    ),
    ("200: a NUL in a glossary term", {"json": {"text": ["a"], "glossary": [["a", "b\x00"]]}}, 422, "glossary[0][1]"),
    ("a two-line error", {"json": {"text": ["a"], "a\nb": 1}}, 422, '"a\\nb": unknown field; the fields are text,'),
    ("an error naming nothing", {"json": {"text": ["a"], "": 1}}, 422, '"": unknown field'),
    (
        "422 'valid dictionary'",
        {"content": b'{"text": ["a"]}', "headers": {"content-type": "text/plain"}},
        415,
        "Content-Type",
    ),
    ("422 'valid dictionary'", {"content": b'{"text": ["a"]}'}, 415, "Content-Type: application/json"),
    ("'Input should be a valid dictionary'", {"json": ["a"]}, 422, "the request body must be a JSON object"),
    ("'13: JSON decode error'", {"content": b'{"text": ["a"', "headers": JSON}, 422, "not valid JSON (Expecting"),
    (
        "'UTF-8 encoded JSON' for a long number",
        {"content": b'{"beam": ' + b"9" * 5000 + b"}", "headers": JSON},
        400,
        "4300 digits",
    ),
    ("an 8 kB error", {"json": {"text": ["a"], "n_best": 10**4000}}, 422, "n_best: a number of about 4001 digits"),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    directory = write_tiny_model_directory(tmp_path_factory.mktemp("model"), max_len_a=0.0, max_len_b=4)
    translator = Translator.load(directory, "cpu", "fp32")
    with TestClient(create_app(translator, directory, Settings()), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize(("what", "request_args", "status", "words"), FOUND, ids=[f[0] for f in FOUND])
def test_what_the_fuzzing_found_is_a_4xx_naming_the_field(client, what, request_args, status, words):
    response = client.post("/v1/translate", **request_args)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error and len(error.splitlines()) == 1 and len(error) < 300, error


def test_wrong_paths_and_methods_say_what_to_use(client):
    assert client.get("/v1/translate").json()["error"] == 'GET "/v1/translate": method not allowed; use POST'
    unknown = client.get("/v2/ü x").json()["error"]  # the path quoted, escaped to ASCII
    assert unknown.startswith('"/v2/\\u00fc x": no such page') and "POST /v1/translate" in unknown, unknown


def test_an_infinite_score_is_written_null_not_a_500():
    body = FiniteJSONResponse({"translations": [{"score": -math.inf, "n_best": [{"log_prob": math.nan}]}]}).body
    assert json.loads(body) == {"translations": [{"score": None, "n_best": [{"log_prob": None}]}]}
