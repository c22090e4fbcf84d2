# One image for web, worker and migrate (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
RUN useradd --create-home --uid 1000 app

COPY requirements.txt requirements-nodeps.txt ./
RUN pip install --no-cache-dir -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt

COPY . .

# collectstatic needs settings, not services: placeholder values, build only.
RUN DATABASE_URL=postgres://build@localhost/build \
    REDIS_URL=redis://localhost:6379/0 \
    SECRET_KEY=build-only-not-a-secret-build-only-not-a-secret \
    FIELD_ENCRYPTION_KEYS=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= \
    python manage.py collectstatic --noinput --verbosity 0

USER app
EXPOSE 8000
CMD ["python", "-m", "uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", "--loop", "uvloop", "--http", "h11", "--h11-max-incomplete-event-size", "65536", "--lifespan", "off", "--no-proxy-headers", "--backlog", "2048", "--timeout-keep-alive", "5", "--timeout-graceful-shutdown", "15", "--no-server-header"]
