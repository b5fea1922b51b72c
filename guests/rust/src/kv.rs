//! The module's key-value store, scoped by the host to the calling
//! principal's organization and this module. Keys are at most
//! [`MAX_KEY_LEN`] bytes and values at most [`MAX_VALUE_LEN`]; the host
//! enforces both (code `too_large`).

use crate::json::{self, base64};
use crate::{code, transport, Error, Result};

/// The longest key the host accepts, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// The largest value the host accepts, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;

/// Returns the value of `key`, or `None` if the key does not exist.
pub fn get(key: &str) -> Result<Option<Vec<u8>>> {
    let req = json::object(&[("key", json::string(key))]);
    transport::round_trip("kv.get", req.as_bytes(), |body| {
        let reply = json::Object::parse(body, "kv.get")?;
        if !reply.get_bool("found")? {
            return Ok(None);
        }
        let enc = reply.get_string("value")?.unwrap_or_default();
        base64::decode(enc.as_bytes())
            .map(Some)
            .ok_or_else(|| Error::new(code::INTERNAL, "kv.get: the value is not base64"))
    })
}

/// Sets `key` to `value`, replacing any value it had.
pub fn put(key: &str, value: &[u8]) -> Result<()> {
    let req = json::object(&[("key", json::string(key)), ("value", json::string(&base64::encode(value)))]);
    transport::round_trip("kv.put", req.as_bytes(), |_| Ok(()))
}

/// Removes `key` and reports whether it existed.
pub fn delete(key: &str) -> Result<bool> {
    let req = json::object(&[("key", json::string(key))]);
    transport::round_trip("kv.delete", req.as_bytes(), |body| json::Object::parse(body, "kv.delete")?.get_bool("deleted"))
}

/// Returns every key that starts with `prefix`, in lexical order. It
/// follows the host's pagination (at most 1000 keys per op).
pub fn list(prefix: &str) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut members = vec![("prefix", json::string(prefix))];
        if let Some(a) = &after {
            members.push(("after", json::string(a)));
        }
        let req = json::object(&members);
        let (page, more) = transport::round_trip("kv.list", req.as_bytes(), |body| {
            let reply = json::Object::parse(body, "kv.list")?;
            Ok((reply.get_strings("keys")?, reply.get_bool("more")?))
        })?;
        if more && page.is_empty() {
            return Err(Error::new(code::INTERNAL, "kv.list: the host said more keys follow but returned none"));
        }
        after = page.last().cloned();
        keys.extend(page);
        if !more {
            return Ok(keys);
        }
    }
}
