"""Webhooks: tell a tenant's services when its tasks finish or wait for a person.

Events are written to an outbox in the transition's transaction (`store.webhook_outbox`),
delivered by workers on the tenant's queue (`delivery`), signed per Standard Webhooks
(`signing`), to URLs checked against private networks at registration and at connect time
(`urls`, `sender`). `service` is what the API and the CLI call.
"""
