# syntax=docker/dockerfile:1
# One image for every process of the service (docs/ARCHITECTURE.md, "Where it runs"); the command picks which:
#   python -m api_service              the gRPC API (the default command)
#   python -m api_service migrate      the schema migrations (the Kubernetes Job)
#   python -m worker_service           a worker replica
#   jobsctl ...                        the command-line client
#   python -m jobs_outbox.relay        forwards a service's outbox table to the API (docs/OUTBOX.md)
# Build: docker build -t durable-jobs:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/jobs
WORKDIR /src
# The dependencies first, read from pyproject.toml itself, so a source change reuses this layer. The SDK
# (sdk/python), which the service depends on, is installed from the checkout with its own dependencies.
COPY pyproject.toml README.md ./
COPY sdk/python ./sdk/python
RUN python -c "import tomllib; print('\n'.join(d for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'] if not d.startswith('durable-jobs-sdk')))" \
        > /tmp/requirements.txt \
    && /opt/jobs/bin/pip install --requirement /tmp/requirements.txt ./sdk/python
COPY proto ./proto
COPY shared ./shared
COPY api_service ./api_service
COPY worker_service ./worker_service
COPY jobsctl ./jobsctl
COPY jobs_outbox ./jobs_outbox
RUN /opt/jobs/bin/pip install --no-deps . \
    && /opt/jobs/bin/python -c "import api_service.__main__, worker_service.__main__, jobsctl.__main__, jobs_outbox.relay, durable_jobs.client"

FROM ${PYTHON_IMAGE} AS runtime
# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN groupadd --system --gid 10001 jobs \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin jobs
COPY --from=build /opt/jobs /opt/jobs
# Bytecode was compiled at install time; the root filesystem may be mounted read-only.
ENV PATH=/opt/jobs/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    JOBS_API_LISTEN=0.0.0.0:50051
USER 10001:10001
# gRPC (JOBS_API_LISTEN) and Prometheus metrics (JOBS_METRICS_LISTEN, set per deployment).
EXPOSE 50051 9464
CMD ["python", "-m", "api_service"]
