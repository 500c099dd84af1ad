"""Tests of the load generator, reports, benchmarks and the fleet simulator."""
