//! A configuration error names its key: the one type config and TLS loading
//! both return (its own room, so that neither imports the other for it).
//! An error from the config file also names the file, and the line and column
//! of the key (`agent.toml:3:11: config key `workers`: ...`), the form editors
//! and terminals jump to.

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config key `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    /// The file as a whole: it cannot be read, or a key it lacks (`key`) is
    /// required by one it has.
    #[error("config file {path}: {}{reason}", key_prefix(.key))]
    File { path: String, key: Option<String>, reason: String },
    /// A place in the file (line and column from 1): the key written there,
    /// when the error has one (a syntax error between keys has none).
    #[error("{path}:{line}:{column}: {}{reason}", key_prefix(.key))]
    At { path: String, line: usize, column: usize, key: Option<String>, reason: String },
}

fn key_prefix(key: &Option<String>) -> String {
    key.as_deref().map(|k| format!("config key `{k}`: ")).unwrap_or_default()
}

impl ConfigError {
    /// The key the error names, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::File { key, .. } | ConfigError::At { key, .. } => key.as_deref(),
        }
    }
}

pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}
