"""A user's module that raises when imported."""

raise RuntimeError("the greeting service is misconfigured\nsecond line never shown")
