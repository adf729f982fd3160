"""A user's module whose workflow takes a built-in's `name@version` (`noop@1`)."""

from tests.support.user_workflows.greeting import Greeting

workflows = [Greeting("noop", 1)]
