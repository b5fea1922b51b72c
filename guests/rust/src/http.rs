//! HTTP requests the host sends for the plugin (the op `http.fetch`). The
//! host, not the plugin, makes the connection: the URL must be covered by
//! one of the module's http grants (`capabilities: {http:
//! ["https://api.example.com:443"]}`), on every redirect too, and the
//! address it reaches is checked after DNS, so a plugin reaches loopback,
//! private or metadata addresses only where a grant names them. Headers a
//! grant injects (a secret as a bearer token) are added by the host and
//! never shown to the plugin.
//!
//! ```ignore
//! let resp = moat::http::fetch(&moat::http::Request::new("POST", "https://api.example.com/v1/items")
//!     .header("Content-Type", "application/json")
//!     .body(r#"{"name":"x"}"#)
//!     .timeout(std::time::Duration::from_secs(5)))?;
//! if resp.status == 200 { /* resp.body: Vec<u8>; resp.header("content-type") */ }
//! ```
//!
//! A status of 4xx or 5xx is a response, not an error. The errors keep the
//! host's code: `denied` for a URL no grant covers (or a redirect to one),
//! `too_large` for a body over its limit, `unavailable` for a server out
//! of reach or too slow. Limits are those of `abi/http.go` in the moat
//! repository.

use crate::json::{self, base64, Object};
use crate::{code, transport, Error, Result};
use std::time::Duration;

/// The longest timeout the host accepts, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 60_000;

/// A request. The default is a GET of no URL with the host's default time
/// and size limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The method; empty is GET.
    pub method: String,
    /// The URL, which an http grant must cover.
    pub url: String,
    /// The plugin's own headers (names case-insensitive).
    pub headers: Vec<(String, String)>,
    /// The body's bytes (at most 2 MiB).
    pub body: Vec<u8>,
    /// The whole request's time, redirects and body included, sent in
    /// whole milliseconds rounded up (`None`: 10 s; at most 60 s).
    pub timeout: Option<Duration>,
    /// The most bytes of response body (0: 1 MiB; at most 2 MiB); a longer
    /// body fails with `too_large`.
    pub max_bytes: u64,
}

impl Request {
    /// A request of `method` to `url`.
    pub fn new(method: &str, url: &str) -> Request {
        Request { method: method.to_string(), url: url.to_string(), ..Request::default() }
    }
    /// A GET of `url`.
    pub fn get(url: &str) -> Request {
        Request::new("GET", url)
    }
    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }
    /// Sets the timeout.
    pub fn timeout(mut self, d: Duration) -> Request {
        self.timeout = Some(d);
        self
    }
    /// Sets the most bytes of response body.
    pub fn max_bytes(mut self, n: u64) -> Request {
        self.max_bytes = n;
        self
    }
}

/// The final response, after redirects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case; a header sent more than once is
    /// its values joined by ", ".
    pub headers: Vec<(String, String)>,
    /// The body's bytes.
    pub body: Vec<u8>,
    /// Where the body came from (the last redirect's target).
    pub url: String,
}

impl Response {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text; an error (`invalid_argument`) when it is not.
    pub fn text(&self) -> Result<&str> {
        std::str::from_utf8(&self.body).map_err(|e| Error::new(code::INVALID_ARGUMENT, format!("the body of {} is not UTF-8: {}", self.url, e)))
    }
}

/// The timeout in whole milliseconds, rounded up. One past the host's
/// maximum stands for anything longer: the host refuses it by name,
/// where clamping here would hide the mistake.
fn timeout_ms(d: Duration) -> u64 {
    let ms = (d.as_nanos() + 999_999) / 1_000_000;
    if ms > MAX_TIMEOUT_MS as u128 {
        MAX_TIMEOUT_MS + 1
    } else {
        ms as u64
    }
}

/// Sends `req` and returns the final response.
pub fn fetch(req: &Request) -> Result<Response> {
    let mut members = Vec::new();
    if !req.method.is_empty() {
        members.push(("method", json::string(&req.method)));
    }
    members.push(("url", json::string(&req.url)));
    if !req.headers.is_empty() {
        let h: Vec<(&str, String)> = req.headers.iter().map(|(k, v)| (k.as_str(), json::string(v))).collect();
        members.push(("headers", json::object(&h)));
    }
    if !req.body.is_empty() {
        members.push(("body", json::string(&base64::encode(&req.body))));
    }
    if let Some(d) = req.timeout {
        let ms = timeout_ms(d);
        if ms > 0 {
            members.push(("timeout_ms", ms.to_string()));
        }
    }
    if req.max_bytes > 0 {
        members.push(("max_bytes", req.max_bytes.to_string()));
    }
    transport::round_trip("http.fetch", json::object(&members).as_bytes(), |body| {
        let o = Object::parse(body, "http.fetch")?;
        let status = o.get_i64("status")?.ok_or_else(|| Error::new(code::INTERNAL, "http.fetch: the reply has no status"))?;
        if !(0..=u16::MAX as i64).contains(&status) {
            return Err(Error::new(code::INTERNAL, format!("http.fetch: the reply's status {} is not an HTTP status", status)));
        }
        let mut headers = Vec::new();
        if let Some(h) = o.get_object("headers")? {
            let h = Object::parse(h.as_bytes(), "http.fetch: headers")?;
            for (name, _) in h.members() {
                headers.push((name.to_string(), h.get_string(name)?.unwrap_or_default()));
            }
        }
        let body = match o.get_string("body")? {
            None => Vec::new(),
            Some(b) => base64::decode(b.as_bytes()).ok_or_else(|| Error::new(code::INTERNAL, "http.fetch: the body is not base64"))?,
        };
        Ok(Response { status: status as u16, headers, body, url: o.get_string("url")?.unwrap_or_default() })
    })
}

/// Fetches `url` with GET and the host's default limits.
pub fn get(url: &str) -> Result<Response> {
    fetch(&Request::get(url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::fake;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn requests_and_replies() {
        let seen = Rc::new(RefCell::new(Vec::<String>::new()));
        let s = seen.clone();
        let big: Vec<u8> = (0..60_000u32).map(|i| (i * 7) as u8).collect();
        let big_reply = format!(r#"{{"status":200,"body":"{}"}}"#, base64::encode(&big));
        fake::set(Some(Box::new(move |_, req| {
            let req = String::from_utf8(req.to_vec()).unwrap();
            s.borrow_mut().push(req.clone());
            if req.contains("/private") {
                return (1, br#"{"code":"denied","message":"no http grant covers https://api.example.com/private"}"#.to_vec());
            }
            if req.contains("/big") {
                return (0, big_reply.clone().into_bytes());
            }
            if req.contains("/bad") {
                return (0, br#"{"status":200,"body":"not base64!"}"#.to_vec());
            }
            (0, br#"{"status":201,"headers":{"body":"Zm9v","content-type":"application/octet-stream"},"body":"Z290OgD/aGk=","url":"https://api.example.com/echo?final"}"#.to_vec())
        })));
        let req = Request::new("POST", "https://api.example.com/echo")
            .header("X-Test", "s\"dk")
            .body(&b"\x00\xffhi"[..])
            .timeout(Duration::from_micros(1500))
            .max_bytes(4096);
        let resp = fetch(&req).unwrap();
        assert_eq!(
            seen.borrow()[0],
            r#"{"method":"POST","url":"https://api.example.com/echo","headers":{"X-Test":"s\"dk"},"body":"AP9oaQ==","timeout_ms":2,"max_bytes":4096}"#
        );
        assert_eq!((resp.status, resp.body.as_slice(), resp.url.as_str()), (201, &b"got:\x00\xffhi"[..], "https://api.example.com/echo?final"));
        assert_eq!(resp.header("Content-Type"), Some("application/octet-stream"));
        assert_eq!(resp.header("body"), Some("Zm9v"), "a header named body is a header");
        assert_eq!(resp.header("x-none"), None);
        assert!(resp.text().is_err(), "the body is not UTF-8");

        let resp = get("https://api.example.com/big").unwrap();
        assert_eq!(resp.body, big, "a body past the first reply buffer");
        assert_eq!(seen.borrow()[1], r#"{"method":"GET","url":"https://api.example.com/big"}"#);
        assert!(get("https://api.example.com/private").unwrap_err().is(code::DENIED));
        assert!(get("https://api.example.com/bad").unwrap_err().is(code::INTERNAL));
        fetch(&Request::get("https://api.example.com/x").timeout(Duration::from_secs(3600))).unwrap();
        assert!(seen.borrow()[4].contains(r#""timeout_ms":60001"#), "a timeout past the maximum is sent for the host to refuse: {}", seen.borrow()[4]);
        fake::set(None);
    }
}
