"""Tests of the difficulty classifier, its features, training and data."""
