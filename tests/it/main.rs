//! Integration tests: a real MariaDB/MySQL, a real HTTP server, real clients.
//! Each test creates its own database (see `common::TestDb`), so they run in parallel.

mod accessibility;
mod admin;
mod admin_screen;
mod auth;
mod bad_input;
mod batch;
mod bookings;
mod catalog;
mod cli;
mod cluster;
mod coalescing;
mod common;
mod contention;
mod customer_words;
#[cfg(feature = "lab")]
mod demo;
mod drain;
mod edit_locks;
mod figures;
mod grants;
mod hardening;
mod holds;
mod idempotency;
mod inventory;
mod lab_apart;
mod languages;
mod layout;
mod local_time;
mod locking;
mod login_throttle;
mod metrics;
mod orders;
mod outage;
mod phones;
mod quotas;
mod reads;
mod schema;
#[cfg(feature = "lab")]
mod screenshots;
mod statements;
mod stays;
