"""Model providers: the `Provider` port, the scripted provider and the OpenAI-compatible one."""

from agent_jobs.gateway.providers.base import ChatResponse, Provider
from agent_jobs.gateway.providers.openai_compat import OpenAICompatProvider
from agent_jobs.gateway.providers.scripted import ScriptedProvider

__all__ = ["ChatResponse", "OpenAICompatProvider", "Provider", "ScriptedProvider"]
