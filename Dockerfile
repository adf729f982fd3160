# agent_jobs: one image for the API, workers, beat, Flower and the one-shot migration.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md celeryconfig.py ./
COPY agent_jobs ./agent_jobs
COPY db ./db
RUN pip install . && rm -rf /src

# An unprivileged user; /var/lib/agent_jobs holds the example workflow's ledger file and
# /var/lib/agent_jobs_sim the simulator's state (compose mounts volumes there: a fresh named
# volume takes the owner of the directory it is mounted on).
RUN useradd --create-home --uid 10001 agent \
    && mkdir -p /var/lib/agent_jobs /var/lib/agent_jobs_sim \
    && chown agent /var/lib/agent_jobs /var/lib/agent_jobs_sim
USER agent
WORKDIR /home/agent

EXPOSE 8000 9808 5555 8090
CMD ["agent-jobs", "api", "--host", "0.0.0.0", "--port", "8000"]
