//! `haita bench bookings`: placeholder, filled in by the next commit.

use crate::config::Config;

#[derive(clap::Args)]
pub struct BookingsBench {}

pub fn bookings(_config: &Config, _options: &BookingsBench) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
