FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.lock .
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY . .
RUN SECRET_KEY=build python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "gpuportal.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "4", "--lifespan", "on", "--no-access-log", \
     "--http", "fairness.gateway.http_server:GatewayHttpProtocol", "--limit-concurrency", "1024", "--timeout-keep-alive", "5"]
