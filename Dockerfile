# syntax=docker/dockerfile:1.7
# One image per service, from one file:
#   docker build --build-arg SERVICE=gateway -t mcp-platform/gateway .
#   (SERVICE = gateway | mcp-service | registry-service | oauth-service)
# The build needs no protoc (the .proto files compile in pure Rust). The runtime image has no
# shell and runs as an unprivileged user; it works with a read-only root filesystem (state
# lives only in mounted volumes).

ARG RUST_VERSION=1.95
ARG DEBIAN=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN} AS build
ARG SERVICE
WORKDIR /src
COPY . .
# The registry and the target directory are BuildKit cache mounts: dependencies are fetched and
# compiled once and reused by every later build of any of the four services.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    test -n "${SERVICE}" \
 && cargo build --release --locked -p "${SERVICE}" --bin "${SERVICE}" \
 && install -D -m 0755 "target/release/${SERVICE}" /out/service

FROM gcr.io/distroless/cc-debian12:nonroot
ARG SERVICE
LABEL org.opencontainers.image.title="mcp-platform ${SERVICE}" \
      org.opencontainers.image.source="https://github.com/example/mcp-platform" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/service /usr/local/bin/service
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/service"]
