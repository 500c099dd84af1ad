"""Tests of the assembly: Serve config, autoscaling, request routing, Helm chart, alerts, images."""
