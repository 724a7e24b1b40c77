"""Every input surface fuzzed with a few hundred generated inputs (tests/fuzz/__init__.py): the promise holds on
each, and each surface's outcomes include the refusals and the successes it is meant to exercise."""

import pytest

from tests.fuzz import run_surface
from tests.fuzz.catalog import MODULES, surfaces

EXAMPLES = 200


@pytest.mark.parametrize("surface", surfaces(), ids=MODULES)
def test_every_generated_input_keeps_the_surface_s_promise(surface):
    report = run_surface(surface, EXAMPLES)
    assert report.cases >= EXAMPLES // 2, report  # Hypothesis ran the cases (not filtered away)
    assert len(report.outcomes) >= 2, report  # both kinds met: inputs the surface takes and ones it refuses
