//! The lab's own environment variables, declared with the lab: a build without it (the
//! production image) neither reads nor lists them. Declared as the app's are
//! ([`crate::config::settings!`]); `haita config` lists both.

use std::path::PathBuf;

use crate::config::{ConfigError, from_process, path, settings, text};

settings! {
    /// Where the race demo's outside locks are kept (`lab::locks`).
    pub struct Settings {
        /// The lab only (the race demo, `haita bench`): the Redis server of the redis-lock
        /// strategies.
        redis_url: String = "REDIS_URL" [url] default "redis://127.0.0.1:6379" => text,
        /// The lab only: the directory of the file-lock strategy's lock files (default:
        /// haita-locks in the system's temporary directory).
        demo_lock_dir: PathBuf = "DEMO_LOCK_DIR"
            default_from std::env::temp_dir().join("haita-locks") => path,
    }
}

impl Settings {
    /// The process's environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read_with(from_process)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_and_the_configuration_pages_list_exactly_the_labs_variables() {
        crate::config::listing::check(Settings::VARIABLES, &[], crate::config::listing::Part::Lab);
    }

    #[test]
    fn the_redis_password_is_not_shown() {
        let settings = Settings::read_with(|name| {
            (name == "REDIS_URL").then(|| "redis://:s3cr3t@cache:6379".to_string())
        })
        .expect("valid");
        let shown = format!("{settings:?}");
        assert!(!shown.contains("s3cr3t") && shown.contains("cache:6379"), "{shown}");
    }
}
