//! `haita serve | migrate | seed | user create | demo race | bench bookings`.

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::auth::{Role, service::UserSpec};
use crate::config::Config;

#[derive(Parser)]
#[command(
    name = "haita",
    version,
    about = "Reservation & inventory app demonstrating database locking patterns"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations and serve HTTP on BIND (default 127.0.0.1:8080).
    Serve {
        /// Also create the demo users, resources and products (idempotent).
        #[arg(long)]
        seed: bool,
    },
    /// Create the database if needed and apply pending migrations.
    Migrate,
    /// Create the demo users and data (idempotent).
    Seed,
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
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
enum DemoCommand {
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
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Booking throughput and p50/p99, hot key and spread keys, at several client counts, for
    /// each correct strategy: through HTTP and as raw SQL from the same process.
    Bookings(crate::bench::BookingsBench),
    /// Orders per second, hot product vs spread products, service vs raw SQL.
    Orders {
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user; the password is read from standard input (first line).
    Create {
        #[arg(long)]
        username: String,
        /// customer, staff or admin.
        #[arg(long, value_parser = |s: &str| s.parse::<Role>())]
        role: Role,
        #[arg(long)]
        display_name: Option<String>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::from_env()?;
    // The benches work in databases of their own and leave DATABASE_URL's untouched.
    match &cli.command {
        Command::Bench { which: BenchCommand::Bookings(options) } => {
            return crate::bench::bookings(&config, options);
        }
        Command::Bench { which: BenchCommand::Orders { clients, seconds } } => {
            anyhow::ensure!((1..=256).contains(clients), "--clients must be between 1 and 256");
            let results = crate::orders::bench::run(&config.database_url, *clients, *seconds)?;
            print!("{}", crate::orders::bench::report(&results, *clients));
            return Ok(());
        }
        _ => {}
    }
    let pool = crate::prepare_database(&config)?;
    match cli.command {
        Command::Migrate | Command::Bench { .. } => Ok(()),
        Command::Seed => crate::seed::run(&pool),
        Command::Serve { seed } => {
            if seed {
                crate::seed::run(&pool)?;
            }
            let bind = config.bind.clone();
            actix_web::rt::System::new().block_on(async move {
                let app = crate::Application::build(config, pool)?;
                log::info!("serving on http://{}", bind.replace(":0", &format!(":{}", app.port())));
                app.run_until_stopped().await?;
                Ok(())
            })
        }
        Command::Demo { command: DemoCommand::Race { strategy, clients, attempts, pause_ms } } => {
            let names: Vec<&str> = strategy.iter().map(String::as_str).collect();
            let spec = crate::demo::RaceSpec::parse(&names, clients, attempts, pause_ms)?;
            let report = crate::demo::race::run(&pool, &config, &spec, "cli")?;
            print!("{}", report.table());
            Ok(())
        }
        Command::User { command: UserCommand::Create { username, role, display_name } } => {
            let mut password = String::new();
            std::io::stdin().read_to_string(&mut password)?;
            let password = password.lines().next().unwrap_or_default();
            let user = crate::auth::service::create_user(
                &mut *pool.get()?,
                &UserSpec {
                    username: &username,
                    display_name: display_name.as_deref().unwrap_or(&username),
                    password,
                    role,
                    is_demo: false,
                },
            )?;
            println!("created user {} (id {}, role {})", user.username, user.id, user.role);
            Ok(())
        }
    }
}
