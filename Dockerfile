# The webhook service (`nkibot serve`): ack path + dispatcher. The runner is not in here.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NKIBOT_QUEUE_URL=sqlite:////var/lib/nkibot/queue.db \
    NKIBOT_STATE_PATH=/var/lib/nkibot/state.db

WORKDIR /app

# The package depends on torch (the runner needs it); the service never imports it, so the
# small CPU-only wheel is enough and is installed first from PyTorch's own index.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch

COPY pyproject.toml README.md ./
COPY nkibot ./nkibot
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /var/lib/nkibot --create-home nkibot

USER nkibot
EXPOSE 8080

# No curl in slim images: probe /healthz with the interpreter we already have.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status == 200 else 1)"]

CMD ["nkibot", "serve", "--host", "0.0.0.0", "--port", "8080"]
