"""Pure domain code: states and the transition table, contracts, hashing, errors, clock.

Nothing in here does I/O, reads a clock or draws random numbers; callers pass those in.
"""
