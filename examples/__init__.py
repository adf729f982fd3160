"""Runnable examples of agents written on `agent_jobs.agents` (see each one's README)."""
