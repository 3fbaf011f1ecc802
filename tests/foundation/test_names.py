"""The one validator for names that reach Slurm, a unix host or Kubernetes."""

import pytest
from django.core.exceptions import ValidationError

from gpuquota.core.names import (
    dns1123_label_error,
    label_value_error,
    slurm_name_error,
    slurm_name_validate,
    unix_user_error,
)


@pytest.mark.parametrize("name", ["vision", "nlp_2", "ml.platform", "a-b", "0team"])
def test_slurm_names_sites_use_pass(name):
    assert slurm_name_error(name) is None


@pytest.mark.parametrize("name,reason", [
    ("vision,nlp", "','"), ("eve root", "' '"), ("$(touch pwned)", "'$'"),
    ("o'brien", "\"'\""), ("a;b", "';'"), ("a\nb", "'\\n'"), ("-x", "start with '-'"),
    ("root", "keeps it"), ("gq-lending", "'gq-'"), ("Vision", "case"), ("", "empty"),
    ("x" * 65, "at most 64"),
])
def test_slurm_names_that_split_or_run_are_refused_with_the_reason(name, reason):
    assert reason in slurm_name_error(name)


def test_own_names_may_carry_the_prefix():
    assert slurm_name_error("gq-res-7", own=True) is None
    assert "keeps it" in slurm_name_error("root", own=True)


def test_the_django_validator_raises_with_the_reason():
    with pytest.raises(ValidationError, match="may hold only"):
        slurm_name_validate("a,b")


@pytest.mark.parametrize("name,ok", [
    ("alice", True), ("first.last", True), ("Bob_2", True), ("zed,root", False),
    ("root", False), ("-rf", False), ("a b", False), ("gq-x", False), ("x" * 33, False),
])
def test_unix_user_names(name, ok):
    assert (unix_user_error(name) is None) is ok


@pytest.mark.parametrize("name,ok", [
    ("ml-platform-emea", True), ("ml_platform-emea", False), ("a" * 63, True),
    ("a" * 64, False), ("-a", False), ("a-", False), ("Upper", False),
])
def test_dns1123_labels(name, ok):
    assert (dns1123_label_error(name) is None) is ok


@pytest.mark.parametrize("value,ok", [
    ("", True), ("ml_platform-emea", True), ("A.b-c_d", True), ("_a", False), ("a" * 64, False),
])
def test_label_values(value, ok):
    assert (label_value_error(value) is None) is ok
