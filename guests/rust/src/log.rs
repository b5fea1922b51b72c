//! The host's structured log. Records are tagged by the host with the
//! module, action, principal and correlation id.
//!
//! ```ignore
//! moat::log::info("greeted", &[("name", name.into()), ("count", count.into())]);
//! moat::info!("greeted", name = name, count = count); // the same
//! ```
//!
//! [`debug`], [`info`], [`warn`] and [`error`] drop the record if the op
//! fails: logging should never be the reason an action fails. Use
//! [`write`] to see the error.

use crate::{json, transport, Result};
use std::borrow::Cow;

/// Log levels accepted by the host.
pub const DEBUG: &str = "debug";
/// Info level.
pub const INFO: &str = "info";
/// Warn level.
pub const WARN: &str = "warn";
/// Error level.
pub const ERROR: &str = "error";

/// The value of a log field.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    /// A string.
    Str(Cow<'a, str>),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A float; NaN and infinities are logged as null.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl Value<'_> {
    fn write_json(&self, out: &mut String) {
        match self {
            Value::Str(s) => json::write_string(out, s),
            Value::Int(v) => out.push_str(&v.to_string()),
            Value::Uint(v) => out.push_str(&v.to_string()),
            Value::Float(v) if v.is_finite() => out.push_str(&v.to_string()),
            Value::Float(_) => out.push_str("null"),
            Value::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        }
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Str(Cow::Borrowed(s))
    }
}
impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Self {
        Value::Str(Cow::Borrowed(s))
    }
}
impl From<String> for Value<'_> {
    fn from(s: String) -> Self {
        Value::Str(Cow::Owned(s))
    }
}
impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f64> for Value<'_> {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
macro_rules! from_int {
    ($variant:ident, $wide:ty: $($t:ty),*) => {$(
        impl From<$t> for Value<'_> {
            fn from(v: $t) -> Self {
                Value::$variant(v as $wide)
            }
        }
    )*};
}
from_int!(Int, i64: i8, i16, i32, i64, isize);
from_int!(Uint, u64: u8, u16, u32, u64, usize);

/// Writes one record and reports whether the host accepted it. `level` is
/// one of [`DEBUG`], [`INFO`], [`WARN`] and [`ERROR`].
pub fn write(level: &str, msg: &str, fields: &[(&str, Value)]) -> Result<()> {
    let mut req = String::from("{\"level\":");
    json::write_string(&mut req, level);
    req.push_str(",\"message\":");
    json::write_string(&mut req, msg);
    if !fields.is_empty() {
        req.push_str(",\"fields\":{");
        for (i, (k, v)) in fields.iter().enumerate() {
            if i > 0 {
                req.push(',');
            }
            json::write_string(&mut req, k);
            req.push(':');
            v.write_json(&mut req);
        }
        req.push('}');
    }
    req.push('}');
    transport::round_trip("log.write", req.as_bytes(), |_| Ok(()))
}

/// Logs at debug level.
pub fn debug(msg: &str, fields: &[(&str, Value)]) {
    let _ = write(DEBUG, msg, fields);
}
/// Logs at info level.
pub fn info(msg: &str, fields: &[(&str, Value)]) {
    let _ = write(INFO, msg, fields);
}
/// Logs at warn level.
pub fn warn(msg: &str, fields: &[(&str, Value)]) {
    let _ = write(WARN, msg, fields);
}
/// Logs at error level.
pub fn error(msg: &str, fields: &[(&str, Value)]) {
    let _ = write(ERROR, msg, fields);
}

/// `moat::debug!("msg", key = value, ...)`: log at debug level.
#[macro_export]
macro_rules! debug {
    ($msg:expr $(, $k:ident = $v:expr)* $(,)?) => {
        $crate::log::debug($msg, &[$((stringify!($k), $crate::log::Value::from($v))),*])
    };
}
/// `moat::info!("msg", key = value, ...)`: log at info level.
#[macro_export]
macro_rules! info {
    ($msg:expr $(, $k:ident = $v:expr)* $(,)?) => {
        $crate::log::info($msg, &[$((stringify!($k), $crate::log::Value::from($v))),*])
    };
}
/// `moat::warn!("msg", key = value, ...)`: log at warn level.
#[macro_export]
macro_rules! warn {
    ($msg:expr $(, $k:ident = $v:expr)* $(,)?) => {
        $crate::log::warn($msg, &[$((stringify!($k), $crate::log::Value::from($v))),*])
    };
}
/// `moat::error!("msg", key = value, ...)`: log at error level.
#[macro_export]
macro_rules! error {
    ($msg:expr $(, $k:ident = $v:expr)* $(,)?) => {
        $crate::log::error($msg, &[$((stringify!($k), $crate::log::Value::from($v))),*])
    };
}
