# syntax=docker/dockerfile:1
# leasectl's container image: a static binary (CGO_ENABLED=0) on distroless
# static, running as a non-root user, with leasectl as the entrypoint.
#
#   docker build -t leasectl --build-arg VERSION=v1.2.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --rm leasectl version
#
# `leasectl run` needs its program in the same image: build the worker's
# image with leasectl copied in, and make leasectl its entrypoint:
#
#   COPY --from=leasectl /usr/local/bin/leasectl /usr/local/bin/leasectl
#   ENTRYPOINT ["/usr/local/bin/leasectl", "run", "--role", "poller", "--", "/app/poller"]
#
# (examples/k8s/ deploys such an image; test/release's tests check this
# file and run its build command.)

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=
ARG DATE=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/leasectl/leasectl/internal/buildinfo.version=${VERSION} -X github.com/leasectl/leasectl/internal/buildinfo.commit=${COMMIT} -X github.com/leasectl/leasectl/internal/buildinfo.date=${DATE}" \
      -o /out/leasectl .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/leasectl /usr/local/bin/leasectl
# distroless's "nonroot" user; numeric, so that Kubernetes' runAsNonRoot
# can check it without reading /etc/passwd.
USER 65532:65532
# --metrics-addr :9464 serves /metrics, /healthz and /readyz.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/leasectl"]
CMD ["--help"]
