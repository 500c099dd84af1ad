"""Tests of the policy schema, its loader and live reload."""
