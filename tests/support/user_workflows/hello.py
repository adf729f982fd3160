"""A user's module that lists its workflows: `hello@2`."""

from tests.support.user_workflows.greeting import Greeting

workflows = [Greeting("hello", 2)]
