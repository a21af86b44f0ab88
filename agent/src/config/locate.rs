//! Where in the config file an error is: every error from the file names the
//! file, the line and column, and the key written there, so an operator goes
//! straight to it (`agent.toml:3:11: config key `workers`: invalid type: ...`).

use crate::error::ConfigError;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;

/// The config file's text and where each of its keys and values is.
pub(super) struct Source {
    path: String,
    text: String,
    /// (key, the key's bytes, its value's bytes); empty when the file is no TOML.
    keys: Vec<(String, Range<usize>, Range<usize>)>,
}

impl Source {
    pub(super) fn new(path: String, text: String) -> Source {
        // A second, untyped read, only for places: a file whose types are
        // wrong is still TOML, and its keys still have lines.
        let keys = toml::from_str::<BTreeMap<Spanned<String>, Spanned<toml::Value>>>(&text)
            .map(|m| m.into_iter().map(|(k, v)| (k.get_ref().clone(), k.span(), v.span())).collect())
            .unwrap_or_default();
        Source { path, text, keys }
    }

    /// Line and column (from 1; the column in characters) of a byte offset.
    fn line_col(&self, at: usize) -> (usize, usize) {
        let at = at.min(self.text.len());
        let mut at = at;
        while !self.text.is_char_boundary(at) {
            at -= 1;
        }
        let before = &self.text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        (line, column)
    }

    /// The file could not be read as the agent's keys: a syntax error, a
    /// value of the wrong type, an unknown key; at its place, with its key.
    pub(super) fn parse_error(&self, e: &toml::de::Error) -> ConfigError {
        // toml's message may run over lines (a syntax error's "expected ...")
        let mut reason = e.message().trim().lines().map(str::trim).collect::<Vec<_>>().join("; ");
        // serde lists every known key after an unknown one: 60 names on one line
        if let Some(i) = reason.find(", expected one of") {
            reason.truncate(i);
            reason = reason.replacen("unknown field", "unknown key", 1) + " (every key: `huntlb-agent --help`, docs/agent.md)";
        }
        let Some(span) = e.span() else {
            return ConfigError::File { path: self.path.clone(), key: None, reason };
        };
        let (line, column) = self.line_col(span.start);
        let key = self
            .keys
            .iter()
            .find(|(_, k, v)| overlaps(k, &span) || overlaps(v, &span))
            .map(|(k, _, _)| k.clone())
            .or_else(|| self.key_on_line(line));
        ConfigError::At { path: self.path.clone(), line, column, key, reason }
    }

    /// A bare key starting line `line` (`key = ...`): the key of a syntax
    /// error, where the file gave no table of keys to look in.
    fn key_on_line(&self, line: usize) -> Option<String> {
        let text = self.text.lines().nth(line - 1)?.trim_start();
        let key: String = text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
        (!key.is_empty()).then_some(key)
    }

    /// A key's error at the key's place in the file, trying each of its
    /// `names` (a key and its old names); None if the file does not hold it.
    pub(super) fn at_key(&self, names: &[&str], reason: &str) -> Option<ConfigError> {
        let (written, span, _) = self.keys.iter().find(|(k, _, _)| names.contains(&k.as_str()))?;
        let (line, column) = self.line_col(span.start);
        let key = names[0].to_string();
        let reason = if written == &key { reason.to_string() } else { format!("{reason} (written as `{written}`)") };
        Some(ConfigError::At { path: self.path.clone(), line, column, key: Some(key), reason })
    }

    pub(super) fn path(&self) -> &str {
        &self.path
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start <= b.start && b.start < a.end.max(a.start + 1)
}
