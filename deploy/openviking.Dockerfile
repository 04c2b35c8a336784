# OpenViking 0.5.2 as the service expects it (configure models in ov.conf, mounted at /etc/openviking).
FROM python:3.11-slim
RUN pip install --no-cache-dir openviking==0.5.2
EXPOSE 1933
ENTRYPOINT ["openviking-server", "--config", "/etc/openviking/ov.conf"]
