"""Benchmarks: commands that print figures, run on Postgres + Redis with worker processes.

Never timed assertions in tests: machines are shared and noisy. Each benchmark measures its
subject and its baseline side by side in one run, alternating rounds, and reports medians.
"""
