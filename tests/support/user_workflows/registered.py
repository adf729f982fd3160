"""A user's module that registers its workflow when imported: `greeter@1`."""

from agent_jobs.workflows import register
from tests.support.user_workflows.greeting import Greeting

register(Greeting("greeter", 1))
