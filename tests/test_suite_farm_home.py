"""Every test ends with FARM_HOME as the run set it (support.farm_home): one that leaves it
changed fails, and the tests after it in its worker still run in the run's home, not the user's."""

from __future__ import annotations


def test_a_test_that_leaves_farm_home_changed_fails_and_the_next_is_in_the_runs_home(pytester):
    pytester.makeconftest('pytest_plugins = ["support.farm_home"]\n')
    pytester.makepyfile(test_home="""
import os

def test_leaves_it_unset():
    os.environ.pop("FARM_HOME")

def test_leaves_it_elsewhere(tmp_path):
    os.environ["FARM_HOME"] = str(tmp_path)

def test_after_them(farm_home):
    assert os.environ["FARM_HOME"] == str(farm_home)

def test_sets_it_with_monkeypatch(monkeypatch, tmp_path):
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaves_it_unset*",
                                 "*the test left FARM_HOME=None (the run's is *): set it with monkeypatch.setenv*"])
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaves_it_elsewhere*"])
