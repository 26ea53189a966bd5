"""The `lab` fixture: a fresh network lab per test, torn down after it. Where the machine cannot
run one (not root, namespaces refused, no tc tbf) every lab test skips with that reason."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from netlab import Lab, LabError, unavailable_reason


@pytest.fixture(scope="session")
def lab_unavailable() -> str | None:
    return unavailable_reason()


@pytest.fixture
def lab(lab_unavailable):
    if lab_unavailable:
        pytest.skip(lab_unavailable)
    with Lab() as built:
        yield built


@contextmanager
def nat_or_skip():
    """Around code that builds NAT routers: a skip naming why iptables could not be had (the lab
    installs it on demand); any other lab error fails the test."""
    try:
        yield
    except LabError as exc:
        if "iptables" in str(exc):
            pytest.skip(f"no NAT in the lab: {exc}")
        raise


def add_nat_or_skip(lab: Lab, name: str):
    """A NAT router, or a skip naming why there is none."""
    with nat_or_skip():
        return lab.add_nat(name)
