//! The moat guest SDK for Rust (ABI version 1).
//!
//! A plugin is a WebAssembly reactor that declares named actions; the moat
//! host invokes them with an input and returns their output. Inside an
//! action the plugin reaches the host through ops: who it runs for
//! ([`caller`]), its configuration ([`config::get`]), the structured log ([`log`], [`info!`]...), a
//! key-value store ([`kv`]), documents in the models of its `moat.yaml`
//! ([`db`]), ranked full-text search ([`knowledge`]), background tasks
//! ([`tasks`]), HTTP requests the host sends ([`http`]), media the host
//! keeps ([`media`]), model calls ([`ai`]) and, for any other op,
//! [`call`].
//!
//! ```ignore
//! fn greet(input: &[u8]) -> moat::Result<String> {
//!     let name = std::str::from_utf8(input)?;
//!     let greeting = moat::config::get("greeting")?.unwrap_or_else(|| "Hello".into());
//!     moat::info!("greeting", name = name);
//!     Ok(format!("{}, {}!", greeting, name))
//! }
//!
//! moat::actions! {
//!     "greet" => greet,
//! }
//! ```
//!
//! Build the plugin as a `cdylib` for `wasm32-wasi` (Debian's rustc 1.63;
//! use the full path, since a rustup toolchain earlier on `PATH` has no
//! wasm target):
//!
//! ```text
//! RUSTC=/usr/bin/rustc /usr/bin/cargo build --offline --release --target wasm32-wasi
//! ```
//!
//! A `cdylib` has no `_start`, so the host never runs `main`; it calls the
//! four exports [`actions!`] defines. The transport is the one import
//! `moat.call`; requests and replies are JSON, written and read by the
//! small [`json`] module (the crate has no dependencies): documents,
//! conditions and metadata are [`json::Value`]s, and JSON text handed in
//! ([`json::Value::raw`]) is checked to be one value before it joins a
//! request.
//!
//! # Errors
//!
//! Ops return [`Error`], which carries an ABI code (see [`code`]) and a
//! message: `Err(e) if e.is(moat::code::CONFLICT)` catches a stale db
//! version. An action that returns an `Error` fails its invocation with that
//! code, so `?` on an op passes its code (for example `denied`) to the
//! host's caller. Any `std::error::Error` converts into an [`Error`] with
//! code `guest_error`. A panic aborts the instance: the host reports a
//! `trap` with the panic message, which the SDK's panic hook prints to
//! stderr on one line.
//!
//! # Lifetime of an instance
//!
//! The host reuses an instance for many invocations, one at a time, so
//! statics persist between calls. The input slice is valid only during the
//! call. Ops work only while an action runs.

#![warn(missing_docs)]

use std::fmt;

pub mod ai;
pub mod db;
pub mod http;
pub mod json;
pub mod knowledge;
pub mod kv;
pub mod log;
pub mod media;
mod principal;
pub mod route;
pub mod tasks;

pub use principal::{caller, Principal};

mod transport;

#[doc(hidden)]
pub mod __rt;

/// The ABI version this crate implements; the host refuses other versions.
pub const ABI_VERSION: u32 = 1;

/// Error codes of the ABI. They cross the wire as strings, so a code this
/// list lacks (from a newer host) still arrives intact in [`Error::code`].
pub mod code {
    /// The request is malformed or a field is out of range.
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    /// The named thing does not exist.
    pub const NOT_FOUND: &str = "not_found";
    /// No op of that name in this host.
    pub const UNKNOWN_OP: &str = "unknown_op";
    /// Policy refused the op or the action.
    pub const DENIED: &str = "denied";
    /// A key, value or message exceeds its limit.
    pub const TOO_LARGE: &str = "too_large";
    /// The thing changed since it was read (a stale db version).
    pub const CONFLICT: &str = "conflict";
    /// A backing service failed; retrying may help.
    pub const UNAVAILABLE: &str = "unavailable";
    /// A bug or an unexpected host failure.
    pub const INTERNAL: &str = "internal";
    /// The invocation used up a host budget (bytes held, log records...).
    pub const RESOURCE_EXHAUSTED: &str = "resource_exhausted";
    /// The action failed on its own account.
    pub const GUEST_ERROR: &str = "guest_error";
    /// A sensitive op needs the invocation to be confirmed first.
    pub const CONFIRMATION_REQUIRED: &str = "confirmation_required";
}

/// A failure with an ABI code: what an op returns and what an action
/// returns to fail its invocation.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: String,
    message: String,
}

impl Error {
    /// An error with the given code (one of [`code`]) and message. An
    /// empty code becomes `guest_error`.
    pub fn new(code: &str, message: impl Into<String>) -> Error {
        let code = if code.is_empty() { code::GUEST_ERROR } else { code };
        Error { code: code.to_string(), message: message.into() }
    }

    /// A `guest_error`: the action failed on its own account.
    pub fn guest(message: impl Into<String>) -> Error {
        Error::new(code::GUEST_ERROR, message)
    }

    /// The ABI code, e.g. `"denied"`.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the error has the given code.
    pub fn is(&self, code: &str) -> bool {
        self.code == code
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(&self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "moat::Error({:?}, {:?})", self.code, self.message)
    }
}

/// Any standard error becomes a `guest_error` with its message, so `?`
/// works on parse errors and the like inside an action. (`Error` itself
/// does not implement `std::error::Error`, which is what makes this
/// blanket conversion possible, as in anyhow.)
impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Error {
        Error::guest(e.to_string())
    }
}

/// `Result<T, moat::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs an op by name with a JSON request (`""` means `{}`) and returns the
/// JSON reply. It is the door to any op this crate does not wrap; use the
/// [`json`] helpers to build and read the payloads.
pub fn call(op: &str, request: &str) -> Result<String> {
    let request = if request.is_empty() { "{}" } else { request };
    transport::round_trip(op, request.as_bytes(), |body| {
        String::from_utf8(body.to_vec()).map_err(|_| Error::new(code::INTERNAL, format!("op {}: reply is not UTF-8", op)))
    })
}

/// The module's configuration, set by whoever loads the module (for
/// example `moat run --config key=value`) or by its manifest.
pub mod config {
    use crate::{json, transport, Result};

    /// Returns the value of `key`, or `None` when the configuration has no
    /// such key. It fails only when the op itself fails.
    pub fn get(key: &str) -> Result<Option<String>> {
        let req = json::object(&[("key", json::string(key))]);
        transport::round_trip("config.get", req.as_bytes(), |body| {
            let reply = json::Object::parse(body, "config.get")?;
            if !reply.get_bool("found")? {
                return Ok(None);
            }
            Ok(Some(reply.get_string("value")?.unwrap_or_default()))
        })
    }
}

/// Declares the plugin's actions and defines the exports of ABI version 1.
/// Use it once, in the crate root of a `cdylib`:
///
/// ```ignore
/// moat::actions! {
///     "greet" => greet,
///     "count" => count,
/// }
/// ```
///
/// A handler is a `fn(&[u8]) -> moat::Result<T>` where `T` converts into
/// `Vec<u8>` (`Vec<u8>`, `String`, `&'static str`...). The order of the list
/// is the wire order: the host addresses actions by their index.
#[macro_export]
macro_rules! actions {
    ($($name:literal => $handler:expr),+ $(,)?) => {
        const __MOAT_NAMES: &[&str] = &[$($name),+];
        const __MOAT_HANDLERS: &[$crate::__rt::Handler] = &[
            $(|input: &[u8]| ($handler)(input).map(::std::convert::Into::<::std::vec::Vec<u8>>::into)),+
        ];

        #[no_mangle]
        pub extern "C" fn moat_abi_version() -> u32 {
            $crate::ABI_VERSION
        }

        #[no_mangle]
        pub extern "C" fn moat_actions() -> u64 {
            $crate::__rt::actions(__MOAT_NAMES)
        }

        #[no_mangle]
        pub extern "C" fn moat_alloc(size: u32) -> u32 {
            $crate::__rt::alloc(size)
        }

        #[no_mangle]
        pub extern "C" fn moat_invoke(action: u32, ptr: u32, len: u32) -> u64 {
            $crate::__rt::invoke(__MOAT_HANDLERS, action, ptr, len)
        }
    };
}
