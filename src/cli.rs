//! `haita serve | migrate | config | user create`, and with the `lab` feature also `seed`, `demo race`,
//! `bench bookings | orders` (see `lab::cli`).

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
        #[cfg(feature = "lab")]
        #[arg(long)]
        seed: bool,
    },
    /// Create the database if needed and apply pending migrations.
    Migrate,
    /// Print the environment variables haita reads, what each does and its default.
    Config,
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Run a batch job beside online users; one instance at a time runs a job (BATCH_LOCK).
    /// Exits 75 when another run holds the job.
    Batch {
        #[command(subcommand)]
        job: BatchCommand,
    },
    #[cfg(feature = "lab")]
    #[command(flatten)]
    Lab(crate::lab::cli::LabCommand),
}

#[derive(Subcommand)]
enum BatchCommand {
    /// Change every product's price by a percentage, at most once per product and revision name
    /// (running the same revision again continues it).
    PriceRevision {
        /// The revision's name (a-z, 0-9, '-', '_', '.').
        #[arg(long)]
        revision: String,
        /// −90 to 1000.
        #[arg(long, allow_hyphen_values = true)]
        percent: i32,
        /// wait: lock each chunk's rows, waiting (bounded) for online saves; skip: leave rows
        /// locked right now for a later run.
        #[arg(long, default_value = "wait")]
        policy: String,
        /// Pause between chunks of 20 products, so online traffic keeps its share.
        #[arg(long, default_value_t = 0)]
        throttle_ms: u64,
        /// Where to write the CSV report; defaults to BATCH_LOCK_DIR with BATCH_LOCK=file.
        #[arg(long)]
        report_dir: Option<std::path::PathBuf>,
    },
    /// Close resources for a range of days (maintenance): no new booking on those days; the
    /// bookings already made stand and are listed in the report. Running the same closure again
    /// does what was left.
    CloseResources {
        /// The first day closed (YYYY-MM-DD), today or later.
        #[arg(long)]
        from: chrono::NaiveDate,
        /// The last day closed (YYYY-MM-DD), at most 92 days on.
        #[arg(long)]
        to: chrono::NaiveDate,
        /// Why, as customers who try to book read it.
        #[arg(long)]
        reason: String,
        /// A resource to close (repeat it); every resource when none is given.
        #[arg(long = "resource")]
        resources: Vec<i64>,
        /// The staff member the closure is made by: it holds edit locks in their name.
        #[arg(long)]
        by: String,
        /// wait: for an editor to finish (bounded by --wait-secs); steal: take their edit lock
        /// (they are told, their input kept as a draft); skip: leave the resource for a later run.
        #[arg(long, default_value = "wait")]
        policy: String,
        /// How long `wait` waits for one editor, or for one day's booking lock.
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
        /// Pause between resources, so online traffic keeps its share.
        #[arg(long, default_value_t = 0)]
        throttle_ms: u64,
        /// Where to write the CSV report; defaults to BATCH_LOCK_DIR with BATCH_LOCK=file.
        #[arg(long)]
        report_dir: Option<std::path::PathBuf>,
    },
}

/// Logged line by line when `serve` starts in `DEMO_MODE`, so that nobody mistakes a demo for
/// a deployment: every line is a warning of its own in the log.
const DEMO_MODE_WARNING: &str = "\
************************************************************************************
DEMO_MODE is on: this instance is a local demo, not for production.
DEMO_MODE: the demo accounts log in with the passwords published on the login page.
DEMO_MODE: without SESSION_KEY the session key is random; cookies are not Secure.
DEMO_MODE: /metrics is public without METRICS_TOKEN; the race demo is open to anyone.
DEMO_MODE: for a deployment unset it (docs/configuration.md, docs/security.md).
************************************************************************************";

/// The exit status of a batch run refused because another run holds the job (`EX_TEMPFAIL`).
pub const EXIT_BUSY: u8 = 75;

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
            let busy =
                e.downcast_ref::<crate::batch::BatchError>().is_some_and(crate::batch::BatchError::is_busy);
            if busy { ExitCode::from(EXIT_BUSY) } else { ExitCode::FAILURE }
        }
    }
}

/// A database seeded once for a demo keeps its demo accounts, whose passwords are published.
/// Outside `DEMO_MODE` they cannot log in (`auth::service::verify`) and their sessions end here;
/// the operator is told they are there, to delete them.
fn warn_of_demo_users(pool: &crate::db::DbPool) -> anyhow::Result<()> {
    let (demo_users, sessions) = crate::auth::service::retire_demo_users(&mut *pool.get()?)?;
    if demo_users > 0 {
        log::warn!(
            "the database holds {demo_users} demo users (made by `seed`, their passwords published); \
             outside DEMO_MODE they cannot log in ({sessions} session(s) of theirs ended). Delete them \
             if this is not a demo."
        );
    }
    Ok(())
}

/// Every variable this build reads: the app's, and the lab's when it is built in.
fn variables() -> Vec<crate::config::Variable> {
    let variables = Config::VARIABLES.to_vec();
    #[cfg(feature = "lab")]
    let variables = [variables, crate::lab::Settings::VARIABLES.to_vec()].concat();
    variables
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Config = cli.command {
        print!("{}", crate::config::help(&variables()));
        return Ok(());
    }
    let config = Config::from_env()?;
    match cli.command {
        Command::Config => Ok(()),
        Command::Migrate => crate::prepare_database(&config).map(drop),
        Command::Serve {
            #[cfg(feature = "lab")]
            seed,
        } => {
            if config.demo_mode {
                for line in DEMO_MODE_WARNING.lines() {
                    log::warn!("{line}");
                }
            } else {
                crate::session_key(&config)?; // refuse a deployment without one before anything else
            }
            if let crate::config::BatchLock::File(dir) = config.batch_lock() {
                crate::batch::lockfile::check_dir(&dir)?;
            }
            let pool = crate::prepare_database(&config)?;
            if !config.demo_mode {
                warn_of_demo_users(&pool)?;
            }
            #[cfg(feature = "lab")]
            {
                crate::lab::prepare(&pool)?;
                if seed {
                    crate::lab::require_demo_mode(&config, "serve --seed")?;
                    crate::lab::seed::run(&pool)?;
                }
            }
            let bind = config.bind.clone();
            actix_web::rt::System::new().block_on(async move {
                let app = crate::Application::build(config, pool)?;
                log::info!("serving on http://{}", bind.replace(":0", &format!(":{}", app.port())));
                app.run_until_signalled().await?;
                log::info!("exiting");
                Ok(())
            })
        }
        Command::User { command: UserCommand::Create { username, role, display_name } } => {
            let pool = crate::prepare_database(&config)?;
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
        Command::Batch { job } => batch(&config, job),
        #[cfg(feature = "lab")]
        Command::Lab(command) => crate::lab::cli::run(command, config),
    }
}

/// `haita batch …`: runs the job in this process, under the guard `BATCH_LOCK` chooses.
fn batch(config: &Config, job: BatchCommand) -> anyhow::Result<()> {
    use std::time::Duration;

    use crate::batch::closure::Closure;
    use crate::batch::price_revision::Revision;
    use crate::batch::{Policy, run};

    let pool = crate::prepare_database(config)?;
    let lock = &config.batch_lock();
    let (summary, targets) = match job {
        BatchCommand::PriceRevision { revision, percent, policy, throttle_ms, report_dir } => {
            let revision = Revision {
                name: revision,
                percent,
                policy: Policy::parse(&policy)?,
                throttle: Duration::from_millis(throttle_ms),
                report_dir: report_dir.or_else(|| config.batch_lock().report_dir()),
            };
            (run(&pool, lock, &revision)?, "products")
        }
        BatchCommand::CloseResources {
            from,
            to,
            reason,
            resources,
            by,
            policy,
            wait_secs,
            throttle_ms,
            report_dir,
        } => {
            let staff = crate::auth::service::find_for_login(&mut *pool.get()?, &by)?
                .filter(|user| user.role.includes(Role::Staff))
                .ok_or_else(|| {
                    anyhow::anyhow!("--by {by:?}: there is no staff member or admin of that name")
                })?;
            let closure = Closure {
                from,
                to,
                reason,
                resources,
                policy: Policy::parse(&policy)?,
                by: staff.id,
                wait: Duration::from_secs(wait_secs),
                throttle: Duration::from_millis(throttle_ms),
                report_dir: report_dir.or_else(|| config.batch_lock().report_dir()),
            };
            (run(&pool, lock, &closure)?, "resource-days")
        }
    };
    println!(
        "run {}: {} {targets}, {} done, {} skipped{}",
        summary.run_id,
        summary.total,
        summary.done,
        summary.skipped,
        summary.report.map(|p| format!(", report {}", p.display())).unwrap_or_default()
    );
    Ok(())
}
