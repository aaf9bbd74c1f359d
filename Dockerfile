# The app image: the product alone, with production defaults (it needs DATABASE_URL and
# SESSION_KEY). The lab (the race demo, the benchmarks, the demo data of `serve --seed`) is
# built in only when asked for, `--build-arg FEATURES=lab`, as docker-compose.yml's demo
# services do; even then it stays switched off unless DEMO_MODE=1. Templates, CSS and
# migrations are compiled into the binary, so the runtime image needs only the client libraries
# of the two engines.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libmariadb-dev libpq-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
ARG FEATURES=""
WORKDIR /src
COPY . .
RUN cargo build --release --locked --features "$FEATURES"

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libmariadb3 libpq5 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/haita /usr/local/bin/haita
ENV BIND=0.0.0.0:8080 RUST_LOG=info
EXPOSE 8080
USER nobody
CMD ["haita", "serve"]
