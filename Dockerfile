# The Dsync server image (docker-compose.yml). Stage 1 builds the wasm module with the official
# Rust image, which can fetch the wasm32 target; stage 2 is Node with the app.
FROM rust:1-bookworm AS wasm
RUN rustup target add wasm32-unknown-unknown \
 && cargo install wasm-pack --locked \
 && cargo install wasm-bindgen-cli --version 0.2.130
WORKDIR /src
COPY wasm wasm
RUN cd wasm && wasm-pack build --target web --release --no-pack

FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
COPY --from=wasm /src/wasm/pkg wasm/pkg
RUN npx vite build client
EXPOSE 8080
VOLUME /data
CMD ["node", "bin/dsync.mjs", "serve", "--host", "0.0.0.0", "--port", "8080", "--data", "/data"]
