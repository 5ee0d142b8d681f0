# The Dsync server image (docker-compose.yml). Stage 1 builds the wasm module with the official
# Rust image, which can fetch the wasm32 target; the last stage is Node with the app. The
# "minio" stage is docker-compose.yml's object store, built from source at the version the tests
# use (scripts/setup.sh); `docker build .` skips it.
FROM rust:1-bookworm AS wasm
RUN rustup target add wasm32-unknown-unknown \
 && cargo install wasm-pack --locked \
 && cargo install wasm-bindgen-cli --version 0.2.130
WORKDIR /src
COPY wasm wasm
RUN cd wasm && wasm-pack build --target web --release --no-pack

FROM golang:1.26-bookworm AS minio-build
RUN go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c

FROM debian:bookworm-slim AS minio
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=minio-build /go/bin/minio /usr/local/bin/minio
EXPOSE 9000
VOLUME /data

FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
COPY --from=wasm /src/wasm/pkg wasm/pkg
# the compiled CLI (cli/dist), which bin/dsync.mjs runs: no TypeScript compiler at start
RUN node scripts/build-cli.mjs && npx vite build client
EXPOSE 8080
VOLUME /data
CMD ["node", "bin/dsync.mjs", "serve", "--host", "0.0.0.0", "--port", "8080", "--data", "/data"]
