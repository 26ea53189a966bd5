"""A network lab of real Linux network namespaces for tests and benchmarks (run as root): see lab.py."""

from netlab.lab import Lab, Peer, Router, clean_stale, unavailable_reason
from netlab.tools import LabError, in_netns

__all__ = ["Lab", "LabError", "Peer", "Router", "clean_stale", "in_netns", "unavailable_reason"]
