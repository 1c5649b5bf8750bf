"""Registered coverage: what a backend's dispatcher registers for each op (no device needed)."""
