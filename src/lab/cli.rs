//! The lab's subcommands: `haita seed | demo race | demo flash-sale | bench bookings | coalescing | stuck-holder |
//! batch | closure | metrics | orders`, flattened into the product's CLI (`crate::cli`) when the `lab` feature is on.

use clap::Subcommand;

use crate::config::Config;

#[derive(Subcommand)]
pub enum LabCommand {
    /// Create the demo users and data (idempotent).
    Seed,
    /// The double-booking demo, from a terminal.
    Demo {
        #[command(subcommand)]
        command: DemoCommand,
    },
    /// Measure a locking path against the same SQL issued by hand, in the same process (each
    /// bench uses a scratch database on the server of DATABASE_URL and drops it afterwards).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
pub enum DemoCommand {
    /// Race many clients for one place per day and print what each strategy let through (the
    /// table of /demo; the race is stored and shown there too).
    Race {
        /// A strategy name, or all. Repeat or separate with commas to pick several.
        #[arg(long, value_delimiter = ',', default_value = "all")]
        strategy: Vec<String>,
        #[arg(long)]
        clients: Option<u32>,
        #[arg(long)]
        attempts: Option<u32>,
        /// Milliseconds between "the day is free" and the insert.
        #[arg(long)]
        pause_ms: Option<u32>,
    },
    /// Hundreds of buyers for a few dozen units of one product, through the HTTP API of running
    /// instances: sold at the click (orders only), then with checkout holds that expire. Prints
    /// what each way sold, refused, held and let expire, counted in the database (the sale is
    /// stored and shown on /demo too).
    FlashSale {
        /// An instance to sell through, e.g. http://127.0.0.1:8080. Repeat it for several
        /// instances on this database: buyer i uses the i-th modulo their number.
        #[arg(long = "base-url", required = true)]
        base_urls: Vec<String>,
        #[arg(long)]
        buyers: Option<u32>,
        #[arg(long)]
        stock: Option<u32>,
        /// How long a hold lasts, in seconds.
        #[arg(long)]
        hold_seconds: Option<u32>,
        /// Buyers who walk away from their hold, in percent.
        #[arg(long)]
        abandon_percent: Option<u32>,
        /// Buyers whose first checkout takes longer than the hold, in percent.
        #[arg(long)]
        slow_percent: Option<u32>,
        /// Replays the same crowd (who abandons, who is slow).
        #[arg(long)]
        seed: Option<u64>,
        /// without-holds, with-holds, or both (the default). Repeat or separate with commas.
        #[arg(long, value_delimiter = ',')]
        variant: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Booking throughput and p50/p99, hot key and spread keys, at several client counts, for
    /// each correct strategy: through HTTP and as raw SQL from the same process.
    Bookings(super::bench::bookings::BookingsBench),
    /// One hot day: bookings per second one at a time (the per-key queue) against coalesced
    /// batches, in process, with the server's statements and commits per booking.
    Coalescing {
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Reservations of the realistic history laid down first (0: none).
        #[arg(long, default_value_t = 1_000_000)]
        history: u64,
    },
    /// One day's lock held by a stuck session while clients book that day: the p99 of requests
    /// that need no such lock, unqueued against the app's queue, budget and batches.
    StuckHolder {
        #[arg(long, default_value_t = 48)]
        clients: usize,
        /// Seconds the stuck session holds the lock.
        #[arg(long, default_value_t = 8)]
        hold: u64,
    },
    /// Online product saves while a price revision runs, per policy, against no batch.
    Batch {
        #[arg(long, default_value_t = 1000)]
        products: usize,
        #[arg(long, default_value_t = 4)]
        editors: usize,
    },
    /// Bookings and resource saves while a maintenance closure runs, per policy, against no batch.
    Closure {
        #[arg(long, default_value_t = 50)]
        resources: usize,
        #[arg(long, default_value_t = 7)]
        days: u64,
        #[arg(long, default_value_t = 4)]
        customers: usize,
        #[arg(long, default_value_t = 2)]
        editors: usize,
    },
    /// What recording the lock metrics costs a booking, in process: on against off.
    Metrics {
        #[arg(long, default_value_t = 200_000)]
        rounds: u32,
    },
    /// Orders per second on a hot product and spread over 64: coalesced against one at a time
    /// and the raw `FOR UPDATE` baseline, in process, with the server's statements and commits
    /// per order; then hot against spread through HTTP.
    Orders(super::bench::orders::OrdersBench),
}

pub fn run(command: LabCommand, config: Config) -> anyhow::Result<()> {
    match command {
        // The benches work in databases of their own and leave DATABASE_URL's untouched.
        LabCommand::Bench { which: BenchCommand::Bookings(options) } => {
            super::bench::bookings::run(&config, &options)
        }
        LabCommand::Bench { which: BenchCommand::Coalescing { clients, seconds, history } } => {
            super::bench::coalescing::run(&config, clients, seconds, history)
        }
        LabCommand::Bench { which: BenchCommand::StuckHolder { clients, hold } } => {
            super::bench::stuck::run(&config, clients, hold)
        }
        LabCommand::Bench { which: BenchCommand::Batch { products, editors } } => {
            anyhow::ensure!((1..=100_000).contains(&products), "--products must be between 1 and 100000");
            anyhow::ensure!((1..=64).contains(&editors), "--editors must be between 1 and 64");
            let results = super::bench::batch::run(&config.database_url, products, editors)?;
            print!("{}", super::bench::batch::report(&results, products, editors));
            Ok(())
        }
        LabCommand::Bench { which: BenchCommand::Closure { resources, days, customers, editors } } => {
            anyhow::ensure!((1..=10_000).contains(&resources), "--resources must be between 1 and 10000");
            anyhow::ensure!((1..=14).contains(&days), "--days must be between 1 and 14");
            anyhow::ensure!((1..=64).contains(&customers), "--customers must be between 1 and 64");
            anyhow::ensure!((1..=64).contains(&editors), "--editors must be between 1 and 64");
            let results =
                super::bench::closure::run(&config.database_url, resources, days, customers, editors)?;
            print!("{}", super::bench::closure::report(&results, resources, days, customers, editors));
            Ok(())
        }
        LabCommand::Bench { which: BenchCommand::Metrics { rounds } } => {
            anyhow::ensure!(rounds > 0, "--rounds must be at least 1");
            print!("{}", super::bench::metrics::report(&super::bench::metrics::run(rounds)));
            Ok(())
        }
        LabCommand::Bench { which: BenchCommand::Orders(options) } => {
            super::bench::orders::run(&config, &options)
        }
        LabCommand::Seed => {
            super::require_demo_mode(&config, "seed")?;
            super::seed::run(&crate::prepare_database(&config)?)
        }
        LabCommand::Demo { command: DemoCommand::Race { strategy, clients, attempts, pause_ms } } => {
            super::require_demo_mode(&config, "demo race")?;
            let pool = crate::prepare_database(&config)?;
            super::prepare(&pool)?;
            let names: Vec<&str> = strategy.iter().map(String::as_str).collect();
            let spec = super::demo::RaceSpec::parse(
                &names,
                clients,
                attempts,
                pause_ms,
                &super::demo::Bounds::LOGGED_IN,
                pool.engine(),
            )?;
            // The table comes at the end; meanwhile each strategy says when it is through.
            let said = |progress: super::demo::Progress<'_>| {
                if let super::demo::Progress::Done { result, .. } = progress {
                    eprintln!(
                        "{}: {} attempts, {} double bookings",
                        result.strategy.name(),
                        result.attempts,
                        result.double_bookings
                    );
                }
            };
            let outside = super::locks::OutsideLocks::from_settings(&super::Settings::from_env()?)?;
            let report = super::demo::run_race(&pool, &config, &outside, &spec, "cli", &said)?;
            print!("{}", report.table());
            Ok(())
        }
        LabCommand::Demo {
            command:
                DemoCommand::FlashSale {
                    base_urls,
                    buyers,
                    stock,
                    hold_seconds,
                    abandon_percent,
                    slow_percent,
                    seed,
                    variant,
                },
        } => {
            super::require_demo_mode(&config, "demo flash-sale")?;
            let asked = super::flash::Asked {
                buyers,
                stock,
                hold_seconds,
                abandon_percent,
                slow_percent,
                seed,
                variants: variant,
            };
            let spec = super::flash::SaleSpec::parse(&base_urls, &asked)?;
            let pool = crate::prepare_database(&config)?;
            super::prepare(&pool)?;
            let operator = super::flash::Starter::Operator;
            let slot = super::flash::take_slot(&mut *pool.get()?, operator)?;
            let report = super::flash::run(&pool, &spec, slot, operator.name())?;
            print!("{}", report.table());
            Ok(())
        }
    }
}
