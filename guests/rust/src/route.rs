//! HTTP routes: an action that a route of moat.yaml (`routes:`) binds to
//! `METHOD /path/{param}` under `/m/{org}/{module}/` gets the request as
//! its input and may answer with a status, a type, headers and a body
//! (`abi/route.go` in the moat repository is the contract).
//!
//! ```ignore
//! let req = moat::route::request(input)?;        // invalid_argument when not called through a route
//! let id = req.param("id").unwrap_or_default();
//! Ok(moat::route::Response::new(201)
//!     .content_type("application/json")
//!     .header("Location", &format!("items/{}", id))
//!     .body(format!(r#"{{"id":"{}"}}"#, id))
//!     .encode())
//! ```
//!
//! Headers are only those the server allows (`Location`, `Cache-Control`,
//! `ETag`, ...; never `Set-Cookie`); anything else fails the call.

use crate::json::{self, base64, Object};
use crate::{code, Error, Result};

/// The request of a route.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The route as the manifest writes it: `GET /items/{id}`.
    pub route: String,
    /// `key`, `public` or `webhook`.
    pub auth: String,
    pub method: String,
    /// The path below `/m/{org}/{module}`, as sent (escaped).
    pub path: String,
    pub params: Vec<(String, String)>,
    /// Each query parameter with its values.
    pub query: Vec<(String, Vec<String>)>,
    /// Allowlisted headers, names in lower case (never Authorization or
    /// Cookie).
    pub headers: Vec<(String, String)>,
    /// A public or webhook caller's source address.
    pub remote: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The path parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    /// The first value of the query parameter `name`.
    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.first()).map(|v| v.as_str())
    }
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str> {
        std::str::from_utf8(&self.body).map_err(|e| Error::new(code::INVALID_ARGUMENT, format!("the request body is not UTF-8: {}", e)))
    }
}

fn not_a_request() -> Error {
    Error::new(code::INVALID_ARGUMENT, "the input is not an HTTP request of a route (moat.yaml routes:)")
}

fn pairs(o: &Object, key: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    if let Some(text) = o.get_object(key)? {
        let m = Object::parse(text.as_bytes(), "route request")?;
        for (name, _) in m.members() {
            out.push((name.to_string(), m.get_string(name)?.unwrap_or_default()));
        }
    }
    Ok(out)
}

/// Reads an action's input as the request of its route.
pub fn request(input: &[u8]) -> Result<Request> {
    let o = Object::parse(input, "route request").map_err(|_| not_a_request())?;
    if o.get_string("moat").ok().flatten().as_deref() != Some("http.request") {
        return Err(not_a_request());
    }
    let s = |k: &str| -> Result<String> { Ok(o.get_string(k)?.unwrap_or_default()) };
    let mut query = Vec::new();
    if let Some(text) = o.get_object("query")? {
        let m = Object::parse(text.as_bytes(), "route request: query")?;
        for (name, _) in m.members() {
            query.push((name.to_string(), m.get_strings(name)?));
        }
    }
    let body = match o.get_string("body_base64")? {
        Some(b) if !b.is_empty() => base64::decode(b.as_bytes()).ok_or_else(|| Error::new(code::INVALID_ARGUMENT, "route request: body_base64 is not base64"))?,
        _ => s("body")?.into_bytes(),
    };
    Ok(Request {
        route: s("route")?,
        auth: s("auth")?,
        method: s("method")?,
        path: s("path")?,
        params: pairs(&o, "params")?,
        query,
        headers: pairs(&o, "headers")?,
        remote: s("remote")?,
        body,
    })
}

/// The answer of a route's action: return [`Response::encode`] as the
/// action's output. Status 0 is 200; an empty content type is
/// text/plain; `media`, a media item's id, is served instead of the body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub media: String,
}

impl Response {
    /// A response of `status`.
    pub fn new(status: u16) -> Response {
        Response { status, ..Response::default() }
    }
    /// Sets the content type.
    pub fn content_type(mut self, ct: &str) -> Response {
        self.content_type = ct.to_string();
        self
    }
    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Response {
        self.body = body.into();
        self
    }
    /// Serves the media item `id` instead of a body.
    pub fn media(mut self, id: &str) -> Response {
        self.media = id.to_string();
        self
    }
    /// The response as the action's output.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = vec![("moat", json::string("http.response"))];
        if self.status != 0 {
            m.push(("status", self.status.to_string()));
        }
        if !self.content_type.is_empty() {
            m.push(("content_type", json::string(&self.content_type)));
        }
        if !self.headers.is_empty() {
            let h: Vec<(&str, String)> = self.headers.iter().map(|(k, v)| (k.as_str(), json::string(v))).collect();
            m.push(("headers", json::object(&h)));
        }
        if !self.body.is_empty() {
            match std::str::from_utf8(&self.body) {
                Ok(t) => m.push(("body", json::string(t))),
                Err(_) => m.push(("body_base64", json::string(&base64::encode(&self.body)))),
            }
        }
        if !self.media.is_empty() {
            m.push(("media", json::string(&self.media)));
        }
        json::object(&m).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses() {
        let req = request(
            br#"{"moat":"http.request","route":"GET /items/{id}","auth":"public","method":"GET","path":"/items/7","params":{"id":"7"},"query":{"q":["a","b"]},"headers":{"accept":"text/html"},"body_base64":"AP8=","remote":"192.0.2.1"}"#,
        )
        .unwrap();
        assert_eq!((req.param("id"), req.query_value("q"), req.query_value("x"), req.header("Accept")), (Some("7"), Some("a"), None, Some("text/html")));
        assert_eq!((req.body.as_slice(), req.remote.as_str(), req.auth.as_str()), (&b"\x00\xff"[..], "192.0.2.1", "public"));
        assert_eq!(request(br#"{"moat":"http.request","body":"h\u00e9"}"#).unwrap().text().unwrap(), "hé");
        for bad in [&b"plain"[..], br#"{"moat":"http.response"}"#, b"{}"] {
            assert!(request(bad).unwrap_err().is(code::INVALID_ARGUMENT));
        }
        assert_eq!(
            String::from_utf8(Response::new(201).content_type("application/json").header("Location", "items/7").body(r#"{"id":"7"}"#).encode()).unwrap(),
            r#"{"moat":"http.response","status":201,"content_type":"application/json","headers":{"Location":"items/7"},"body":"{\"id\":\"7\"}"}"#
        );
        assert_eq!(
            String::from_utf8(Response::new(0).body(&b"\x89\xff"[..]).encode()).unwrap(),
            r#"{"moat":"http.response","body_base64":"if8="}"#
        );
        assert_eq!(String::from_utf8(Response::default().media("abc").encode()).unwrap(), r#"{"moat":"http.response","media":"abc"}"#);
    }
}
