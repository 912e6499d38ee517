# gpupool's control-plane image: `docker build -t gpupool:0.1.0 .`
# Stage 1 builds the wheel; stage 2 installs it with the kube, web (webhook) and face (REST API,
# dashboard) extras on a clean slim image and runs as a non-root user
# (deploy/scheduler-deployment.yaml runs it as uid 65532).
FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim
RUN groupadd --system --gid 65532 gpupool \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpupool
COPY --from=build /dist/ /tmp/dist/
RUN wheel="$(ls /tmp/dist/gpupool-*.whl)" \
    && pip install --no-cache-dir "${wheel}[kube,web,face]" \
    && rm -rf /tmp/dist
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9402
ENTRYPOINT ["gpupool"]
CMD ["control-plane", "--http-address=0.0.0.0:9402"]
