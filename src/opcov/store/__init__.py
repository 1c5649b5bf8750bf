"""Data files: reading, validating and writing coverage and op-set files; where they live (layout)."""
