"""Helpers of scripts/gpu-validate, the GPU validation kit (see docs/gpu-results.md)."""
