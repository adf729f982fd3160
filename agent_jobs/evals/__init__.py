"""Evaluation: suites (cases with an expected world), adversarial scripted models, the runner
(real workers against the simulator, N runs per case), scorers and reports.

It drives the platform only through its public interfaces: the orchestrator's submit and
approval calls, the simulator's HTTP admin (worlds, faults, request log), and the task rows.
"""
