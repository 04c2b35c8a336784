# OpenViking 0.5.2 as the compose file runs it: on every interface, in API-key mode with the
# root key from the ov-root-key secret (ov_start.py); configure the models in
# deploy/openviking/ov.conf (from ov.conf.example), mounted at /etc/openviking.
FROM python:3.11-slim
RUN pip install --no-cache-dir openviking==0.5.2
COPY ov_start.py /usr/local/bin/ov_start.py
EXPOSE 1933
ENTRYPOINT ["python", "/usr/local/bin/ov_start.py"]
