# One image for every Portico process: console, worker and serving replicas differ only by command.
#   docker build .               the default (CPU) image
#   docker build --target gpu .  the GPU image: requirements-gpu.lock (onnxruntime-gpu in place of
#                                onnxruntime, the CUDA 13 runtime wheels, TensorRT, NVML); the host
#                                brings the NVIDIA driver (NVIDIA Container Toolkit)
FROM python:3.11-slim AS cpu

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PORTICO_VAR_DIR=/var/lib/portico

RUN apt-get update && apt-get install -y --no-install-recommends make nodejs npm bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.lock pyproject.toml package.json package-lock.json ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e . && make static/vendor/.installed \
    && DJANGO_SETTINGS_MODULE=console.settings.local python manage.py collectstatic --noinput

RUN useradd --system --home /var/lib/portico portico && mkdir -p /var/lib/portico \
    && chown portico /var/lib/portico
USER portico
EXPOSE 8080 8000 8001 8002
CMD ["python", "manage.py", "runconsole", "--host", "0.0.0.0", "--port", "8080"]

# The GPU image: the CPU runtime is removed before its GPU build takes the same module's place.
FROM cpu AS gpu
USER root
RUN python deploy/gpu/lock.py && pip uninstall --yes onnxruntime \
    && pip install --no-cache-dir -r requirements-gpu.lock \
    && python -c "import onnxruntime, tensorrt, pynvml"
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER portico

# The default target stays the CPU image.
FROM cpu
