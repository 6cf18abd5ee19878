"""Every mutant's snippet occurs exactly once in its file (test/mutants):
a change to the code that breaks one is caught by make test, and not
only by the mutants' run in make test-extra, which then runs none of
them (the first .ci/run of a stop on 2026-11-27: three snippets no
longer matched the code, and 254 mutants were not run)."""
import importlib.util

from conftest import ROOT


def test_every_mutant_snippet_applies_to_the_code():
    spec = importlib.util.spec_from_file_location("mutants_run", ROOT / "test" / "mutants" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)  # its main() runs only as a script
    assert len(run.MUTANTS) > 200, len(run.MUTANTS)
    assert run.check_snippets(run.MUTANTS, str(ROOT)) == []
