"""A user's module that imports and registers nothing."""

GREETING = "hello"
