# syntax=docker/dockerfile:1
# msgw container image: static-ish Rust binary on distroless (no shell, no package manager),
# running as the non-root user 65532.
#
#   docker build -t msgw:0.1.0 --build-arg MSGW_REVISION=$(git rev-parse --short=12 HEAD) .
#   docker run --rm -p 50051:50051 -p 8080:8080 -p 9090:9090 msgw:0.1.0   # sandbox upstream

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# --- skeleton: only what decides the dependency build ---------------------------------------------
# Cargo manifests, build.rs and proto/, with every target root (src/main.rs, src/lib.rs, src/bin/*,
# benches/, tests/, tests/benches/, examples/) replaced by an empty stub. Editing Rust sources leaves the skeleton
# byte-identical, so the dependency layer below stays cached.
FROM ${RUST_IMAGE} AS skeleton
WORKDIR /src
COPY . .
RUN set -eu; \
    mkdir -p /skeleton; \
    cp Cargo.toml Cargo.lock /skeleton/; \
    for p in build.rs proto .cargo; do if [ -e "$p" ]; then cp -r "$p" /skeleton/; fi; done; \
    { \
      for f in src/lib.rs src/main.rs; do if [ -f "$f" ]; then echo "$f"; fi; done; \
      for d in src/bin benches tests tests/benches examples; do \
        if [ -d "$d" ]; then find "$d" -regex "$d/[^/]*\.rs" -o -regex "$d/[^/]*/main\.rs"; fi; \
      done; \
    } | while read -r f; do \
      mkdir -p "/skeleton/$(dirname "$f")"; \
      if [ "$f" = src/lib.rs ]; then : >"/skeleton/$f"; else echo 'fn main() {}' >"/skeleton/$f"; fi; \
    done

# --- builder ------------------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
WORKDIR /src
# Dependency-caching step: builds every dependency (and runs build.rs) against the stubs.
COPY --from=skeleton /skeleton/ ./
# The dist profile (Cargo.toml): fat LTO, one codegen unit; slower to build than
# --release, faster to run.
RUN cargo build --profile dist --locked
# The real sources. COPY keeps the files' own mtimes, possibly older than the stub build: touch the
# crate roots so cargo rebuilds msgw itself instead of keeping the stub binary.
COPY . .
# .git stays out of the context: pass the revision for msgw_build_info instead
# (docker build --build-arg MSGW_REVISION=$(git rev-parse --short=12 HEAD) .).
ARG MSGW_REVISION=unknown
RUN touch src/main.rs src/lib.rs \
 && cargo build --profile dist --locked --bin msgw \
 && install -D -m 0755 target/dist/msgw /out/msgw \
 && mkdir -p /out/data

# --- runtime ------------------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
COPY --from=builder /out/msgw /usr/local/bin/msgw
# Writable home of the embedded SQLite store (a volume in Kubernetes; see helm/msgw).
COPY --from=builder --chown=65532:65532 /out/data /data
ENV MSGW_STORE_URL=sqlite:///data/msgw.db
VOLUME ["/data"]
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# gRPC (MSGW_GRPC_ADDR), HTTP webhooks (MSGW_HTTP_ADDR), admin: /metrics, /readyz, /livez (MSGW_ADMIN_ADDR).
EXPOSE 50051 8080 9090
ENTRYPOINT ["/usr/local/bin/msgw"]
CMD ["serve"]
