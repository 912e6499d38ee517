# gpupool's image for users with Docker: `docker build -t ghcr.io/gpupool/gpupool:0.1.0 .`
# It is the image scripts/build-images.sh builds without Docker (from Debian's packages with
# mmdebstrap, packed with umoci): both follow deploy/images/images.env, and
# tests/contract/test_images.py checks that they agree. Debian bookworm with Debian's python3,
# the wheel with the control plane's, webhook's and agent's dependencies in the venv /opt/gpupool,
# a non-root user (uid 65532, as the chart runs it), entrypoint `gpupool`: one image, the command
# (control-plane, webhook, agent) picks the role. Extras: kube, web (webhook), face (REST API,
# dashboard), agent, postgres, dra (CEL device selectors).
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python3 -m venv /tmp/build \
    && /tmp/build/bin/pip install --no-cache-dir build \
    && /tmp/build/bin/python -m build --wheel --outdir /dist

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 gpupool \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpupool
COPY --from=build /dist/ /tmp/dist/
RUN python3 -m venv /opt/gpupool \
    && wheel="$(ls /tmp/dist/gpupool-*.whl)" \
    && /opt/gpupool/bin/pip install --no-cache-dir "${wheel}[kube,web,face,agent,postgres,dra]" \
    && rm -rf /tmp/dist
ENV PATH=/opt/gpupool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9402
ENTRYPOINT ["gpupool"]
CMD ["control-plane", "--http-address=0.0.0.0:9402"]
