"""`python -m tests.support.user_workflows.api_submit TENANT KEY WORKFLOW INPUT_JSON`: one
submission through the API as `agent-jobs api` builds it (`create_app()` over this process's
runtime and its one registry, from the environment), in a process of its own. Prints the
response's status code and JSON body as one JSON line."""

from __future__ import annotations

import json
import sys

from fastapi.testclient import TestClient

from agent_jobs.api import create_app
from agent_jobs.api.auth import mint_token
from agent_jobs.config import settings


def main(tenant: str, key: str, workflow: str, raw_input: str) -> None:
    token = mint_token(settings(), tenant_id=tenant, subject="svc", roles=[])
    client = TestClient(create_app())
    r = client.post(
        "/v1/tasks",
        json={"workflow": workflow, "input": json.loads(raw_input)},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
    )
    print(json.dumps({"status": r.status_code, "body": r.json()}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
