//! A configuration error names its key: the one type config and TLS loading
//! both return (its own room, so that neither imports the other for it).

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config key `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
}

pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}
