"""Tests against the running service: thinktier up, faults, drain, fuzzing."""
