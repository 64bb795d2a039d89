# syntax=docker/dockerfile:1
# One image per service, from one file:
#
#   docker build --build-arg SERVICE=gateway -t ghcr.io/example/mcp-platform/gateway:0.1.0 .
#   (SERVICE = gateway | mcp-service | registry-service | oauth-service)
#
# The gateway's image holds `gateway-edge` and mcp-service's `mcp-service-remote`: the same
# services with nothing embedded, since the other components run in images of their own.
# `--build-arg BIN=gateway` builds the gateway that can also run every component in its one
# process (`--standalone`), `--build-arg BIN=mcp-service` the one with a registry inside.
#
# Stages: `chef` (the Rust toolchain plus cargo-chef), `planner` (reduces the workspace to a
# recipe: manifests and lock file only), `build` (compiles the dependencies from the recipe in
# their own layer, which stays cached until a Cargo.toml or Cargo.lock changes, then the
# service), and the runtime image: distroless (no shell, no package manager), glibc and
# CA certificates only, user 65532, fine with a read-only root filesystem (the services write
# only to mounted volumes). No protoc is needed: the .proto files compile in pure Rust.
# Pin the base images by digest in your CI (e.g. with Renovate); deploy/check.sh lints this
# file (hadolint and the project's own rules).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm
ARG CARGO_CHEF_VERSION=0.1.78

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS chef
ARG CARGO_CHEF_VERSION
RUN cargo install cargo-chef --version "${CARGO_CHEF_VERSION}" --locked \
 && rm -rf "${CARGO_HOME}/registry"
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
ARG SERVICE
ARG BIN
# Refuse anything but the four services (and the two binaries of the gateway and of
# mcp-service) before spending time on a build.
RUN case "${SERVICE}" in \
      gateway|mcp-service|registry-service|oauth-service) ;; \
      *) echo "build arg SERVICE must be gateway, mcp-service, registry-service or oauth-service (got '${SERVICE}')" >&2; exit 1 ;; \
    esac \
 && case "${SERVICE}:${BIN}" in \
      *:|gateway:gateway-edge|mcp-service:mcp-service-remote|"${SERVICE}:${SERVICE}") ;; \
      *) echo "build arg BIN must be empty, the service's name, gateway-edge (gateway) or mcp-service-remote (mcp-service) (got '${BIN}')" >&2; exit 1 ;; \
    esac
COPY --from=planner /src/recipe.json recipe.json
# The dependency layer: the same package selection and profile as the build below, so that
# only the workspace's own crates compile after a source change.
RUN cargo chef cook --release --locked -p "${SERVICE}" --recipe-path recipe.json
COPY . .
RUN bin="${BIN:-${SERVICE}}" \
 && if [ -z "${BIN}" ] && [ "${SERVICE}" = gateway ]; then bin=gateway-edge; fi \
 && if [ -z "${BIN}" ] && [ "${SERVICE}" = mcp-service ]; then bin=mcp-service-remote; fi \
 && cargo build --release --locked -p "${SERVICE}" --bin "${bin}" \
 && install -D -m 0755 "target/release/${bin}" /out/service

# glibc 2.36 (Debian 12) in the runtime image, the same as the bookworm builder above.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
ARG SERVICE
LABEL org.opencontainers.image.title="mcp-platform ${SERVICE}" \
      org.opencontainers.image.description="MCP platform: ${SERVICE}" \
      org.opencontainers.image.source="https://github.com/example/mcp-platform" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/service /usr/local/bin/service
# The distroless `nonroot` user, by number so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/service"]
