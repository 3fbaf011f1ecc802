FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# The runtime only (requirements.txt); tests and development tools are not in the image.
COPY requirements.txt requirements-ldap.txt ./
RUN pip install --no-cache-dir -r requirements.txt
# The LDAP/AD login is an extra (`--build-arg LDAP=1`, or GPUQUOTA_LDAP=1 with compose):
# python-ldap builds against OpenLDAP's and Cyrus SASL's headers.
ARG LDAP=0
RUN if [ "$LDAP" = "1" ]; then \
      apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libldap-dev \
        libsasl2-dev && rm -rf /var/lib/apt/lists/* \
      && pip install --no-cache-dir -r requirements-ldap.txt; \
    fi
COPY . .
RUN DEBUG=0 SECRET_KEY=build-only-collectstatic GPUQUOTA_MAIL_ENABLED=0 python manage.py collectstatic --noinput
RUN useradd --system --uid 10001 gpuquota && mkdir -p /app/var && chown gpuquota /app/var
USER gpuquota
EXPOSE 8000
CMD ["gunicorn", "gpuquota.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4", "--access-logfile", "-"]
