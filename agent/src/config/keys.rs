//! How a config key is declared: once, in `raw.rs`'s table (name, type,
//! default, range, what it needs, help line). From that one row come the
//! field the file and the flags fill (`Raw`), laying flags over the file,
//! the value with its default and range checked, the "only meaningful with"
//! check, `--help`, `--print-defaults`, and the test that holds
//! docs/agent.md's table to the code.

use crate::error::{invalid, ConfigError};

/// The longest a `_ms` key may be: a day.
pub const MAX_MS: u64 = 86_400_000;

/// A key's default as declared.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyDefault {
    /// What the agent runs with when the key is not given.
    Value(serde_json::Value),
    /// Worked out from other keys, or none: said in words (`listen's port`,
    /// `off`, empty for a key with none).
    Words(String),
}

/// One key's declaration, as data: what `--help`, `--print-defaults` and the
/// docs test read.
#[derive(Debug, Clone)]
pub struct Key {
    pub name: &'static str,
    pub help: String,
    pub default: KeyDefault,
    /// Inclusive (lowest, highest); None: at least the lowest.
    pub range: Option<(u64, Option<u64>)>,
    /// What must hold for the key to mean anything (`fleet_listen`,
    /// `load = "llm"`): given without it, the agent stops naming the key.
    pub needs: &'static [&'static str],
}

impl Key {
    /// The default as `--help` and docs/agent.md write it.
    pub fn shown(&self) -> String {
        match &self.default {
            KeyDefault::Value(serde_json::Value::String(s)) => s.clone(),
            KeyDefault::Value(v) => v.to_string(),
            KeyDefault::Words(w) => w.clone(),
        }
    }
}

/// A row's doc lines as one help line, without a final period (as clap
/// writes a doc comment's).
pub(super) fn help_line(lines: &[&str]) -> String {
    let line = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
    line.strip_suffix('.').map(str::to_string).unwrap_or(line)
}

/// A key's `--help` (`name`, of `table`): its help line and its default.
pub(super) fn help(table: Vec<Key>, name: &str) -> String {
    let key = table.into_iter().find(|k| k.name == name).expect("a declared key");
    match key.shown().as_str() {
        "" => key.help,
        "required" => format!("{} [required]", key.help),
        shown => format!("{} [default: {shown}]", key.help),
    }
}

/// `--print-defaults`: every key of `table` with a value when not given, and
/// that value, as JSON.
pub(super) fn defaults_json(table: Vec<Key>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = table
        .into_iter()
        .filter_map(|k| match k.default {
            KeyDefault::Value(v) => Some((k.name.to_string(), v)),
            KeyDefault::Words(_) => None,
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// `v` within `lo` and `hi` (None: no highest), else an error naming `key`.
pub(super) fn in_range(key: &'static str, v: u64, lo: u64, hi: Option<u64>, unit: &str) -> Result<(), ConfigError> {
    match hi {
        Some(hi) if !(lo..=hi).contains(&v) => Err(invalid(key, format!("{v} is out of range ({lo} to {hi}{unit})"))),
        None if v < lo => Err(invalid(key, format!("{v} is out of range (at least {lo}{unit})"))),
        _ => Ok(()),
    }
}

/// An ip:port address, else an error naming `key`.
pub(super) fn addr(key: &'static str, v: &str) -> Result<std::net::SocketAddr, ConfigError> {
    v.parse().map_err(|_| invalid(key, format!("`{v}` is not an ip:port address")))
}

/// The table: each row
/// `/// help` `name: Type = Kind(default)[, in LO to HI | , at least LO][, needs ["cond", ...]];`.
/// Kinds: `Num` (a number, its range checked), `Ms` (milliseconds up to
/// [`MAX_MS`], a `Duration`), `Addr` (an ip:port, parsed), `Value` (taken
/// as is, checked where it is used), `Words` (no single value: worked out
/// where it is used; the words say what it is). Every kind but `Words`
/// gives `Values` (on `Raw`) a method of the key's name: the value the agent
/// runs with.
macro_rules! keys {
    (
        $(#[$attr:meta])*
        pub struct $raw:ident { $($extra:tt)* }
        $(
            $(#[doc = $doc:literal])+
            $name:ident: $ty:ty = $kind:ident($default:expr)
                $(, in $lo:literal to $hi:expr)? $(, at least $min:literal)? $(, needs [$($need:literal),+])?;
        )*
    ) => {
        $(#[$attr])*
        pub struct $raw {
            $($extra)*
            $(
                #[arg(long, help = super::keys::help(key_table(), stringify!($name)))]
                pub $name: Option<$ty>,
            )*
        }

        /// Every key's declaration, in the table's order.
        #[allow(clippy::unnecessary_cast)]
        pub fn key_table() -> Vec<super::keys::Key> {
            vec![$(super::keys::Key {
                name: stringify!($name),
                help: super::keys::help_line(&[$($doc),+]),
                default: keys!(@default $kind($default)),
                range: keys!(@range $kind [$($lo, $hi)?] [$($min)?]),
                needs: &[$($($need),+)?],
            }),*]
        }

        impl $raw {
            /// Lay `over` (the flags) on this (the file): the names of the keys it gave.
            pub(super) fn overlay(&mut self, over: $raw) -> Vec<&'static str> {
                let mut given = Vec::new();
                $(if over.$name.is_some() {
                    self.$name = over.$name;
                    given.push(stringify!($name));
                })*
                given
            }

            /// Given without `cond` (`!met`): the first key that needs it, named.
            pub(super) fn only_with(&self, cond: &str, met: bool) -> Result<(), crate::error::ConfigError> {
                $(if !met && self.$name.is_some() && [$($($need),+)?].contains(&cond) {
                    return Err(crate::error::invalid(stringify!($name), format!("only meaningful with {cond}")));
                })*
                Ok(())
            }
        }

        /// Each key's value as the agent runs with it: its default when not
        /// given, its range checked (a trait, so a key may share a name with
        /// one of `Raw`'s own functions, as `load` does).
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion, clippy::clone_on_copy)]
        pub(super) trait Values {
            fn raw(&self) -> &$raw;
            $(keys!(@get $kind $name [$ty] ($default) [$($lo, $hi)?] [$($min)?]);)*
        }

        impl Values for $raw {
            fn raw(&self) -> &$raw {
                self
            }
        }
    };

    (@default Words($d:expr)) => { super::keys::KeyDefault::Words(String::from($d)) };
    (@default $kind:ident($d:expr)) => { super::keys::KeyDefault::Value(serde_json::to_value($d).expect("a default is JSON")) };

    (@range Num [$lo:literal, $hi:expr] []) => { Some(($lo, Some(($hi) as u64))) };
    (@range Num [] [$min:literal]) => { Some(($min, None)) };
    (@range Ms [] [$min:literal]) => { Some(($min, Some(super::keys::MAX_MS))) };
    (@range $kind:ident [] []) => { None };

    (@get Num $name:ident [$ty:ty] ($d:expr) [$($lo:literal, $hi:expr)?] [$($min:literal)?]) => {
        /// The value the agent runs with, its range checked.
        fn $name(&self) -> Result<$ty, crate::error::ConfigError> {
            let v: $ty = self.raw().$name.unwrap_or($d);
            $(super::keys::in_range(stringify!($name), v as u64, $lo, Some(($hi) as u64), "")?;)?
            $(super::keys::in_range(stringify!($name), v as u64, $min, None, "")?;)?
            Ok(v)
        }
    };
    (@get Ms $name:ident [$ty:ty] ($d:expr) [] [$min:literal]) => {
        /// The duration the agent runs with, its range checked.
        fn $name(&self) -> Result<std::time::Duration, crate::error::ConfigError> {
            let v: u64 = self.raw().$name.unwrap_or($d);
            super::keys::in_range(stringify!($name), v, $min, Some(super::keys::MAX_MS), " ms")?;
            Ok(std::time::Duration::from_millis(v))
        }
    };
    (@get Addr $name:ident [$ty:ty] ($d:expr) [] []) => {
        /// The address the agent runs with.
        fn $name(&self) -> Result<std::net::SocketAddr, crate::error::ConfigError> {
            super::keys::addr(stringify!($name), self.raw().$name.as_deref().unwrap_or($d))
        }
    };
    (@get Value $name:ident [$ty:ty] ($d:expr) [] []) => {
        /// The value the agent runs with (checked where it is used).
        fn $name(&self) -> $ty {
            self.raw().$name.clone().unwrap_or_else(|| <$ty>::from($d))
        }
    };
    (@get Words $name:ident [$ty:ty] ($d:expr) [] []) => {};
}
pub(super) use keys;
