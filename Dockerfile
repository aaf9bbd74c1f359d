# The app image, built with the lab (the demo, the benches, the demo data of `serve --seed`),
# which stays switched off unless DEMO_MODE=1: as it is, the image serves with production
# defaults and needs SESSION_KEY (docker-compose.yml runs it as a demo). Templates, CSS and
# migrations are compiled into the binary, so the runtime image needs only the client libraries
# of the two engines.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libmariadb-dev libpq-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --features lab

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libmariadb3 libpq5 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/haita /usr/local/bin/haita
ENV BIND=0.0.0.0:8080 RUST_LOG=info
EXPOSE 8080
USER nobody
CMD ["haita", "serve"]
