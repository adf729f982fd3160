"""A stand-in for a company's order, payments, refund and policy systems, served over HTTP.

The refund agent reaches these systems only through the HTTP contract in `CONTRACT.md`, so any
service speaking that contract can replace this one. The pieces:

- `server`: `serve()` (blocking, for the CLI) and `SimServer` (a context manager for tests and
  demos);
- `worlds`: builders for the incident world and the golden-case worlds, as plain JSON-able dicts;
- `admin`: `SimAdmin`, a small `requests` client for the admin routes (load worlds, arm faults,
  read the request log);
- `world`, `faults`, `request_log`, `routes`, `app`, `handler`: the implementation.

Importing the package imports nothing; pick the module you need.
"""
