"""Workflows of a user's own, loaded the ways a user loads them (`AGENT_JOBS_WORKFLOWS`, an entry
point): `hello` lists its workflows, `registered` calls `register()` at import, and the rest fail
each in their own way (`broken` raises at import, `empty` registers nothing, `conflicting` takes
a built-in's `name@version`)."""
