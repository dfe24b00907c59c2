FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.lock .
# python-ldap (under django-auth-ldap) builds from source against the OpenLDAP headers; the
# compiler goes once it has, the libraries stay.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
    && pip install --no-cache-dir --require-hashes -r requirements.lock \
    && apt-get purge -y gcc && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
COPY . .
RUN SECRET_KEY=build python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "gpuportal.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "4", "--lifespan", "on", "--no-access-log", \
     "--http", "fairness.gateway.http_server:GatewayHttpProtocol", "--limit-concurrency", "1024"]
