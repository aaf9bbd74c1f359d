//! `haita bench`: what the app's code costs on top of the locking itself, measured against the
//! same statements issued by hand from the same process, each in a scratch database of its own.
//!
//! - `bookings.rs`: the booking strategies, through HTTP and as raw SQL;
//! - `orders.rs`: the order path, through the service and as hand-written SQL;
//! - `coalescing.rs`: one hot day, bookings one at a time against coalesced batches.

pub mod bookings;
pub mod coalescing;
pub mod orders;
