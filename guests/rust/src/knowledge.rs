//! The module's knowledge: documents of text with metadata in named
//! collections, searched by ranked full text, scoped by the host to the
//! calling principal's organization and this module. A module reaches only
//! the collections its manifest asks for and the profile grants
//! (`capabilities: {knowledge: [docs]}`).
//!
//! ```ignore
//! moat::knowledge::add("docs", "guide", "How to rotate an API key", &[("lang", "en".into())])?;
//! let hits = moat::knowledge::search("docs", "rotate key", &moat::knowledge::Search::new().filter("lang", "en"))?;
//! ```
//!
//! A query is plain text, never syntax: quotes, operators and the like are
//! only separators between words. Metadata and filters are flat: strings,
//! numbers and booleans. The rules and limits are those of
//! `abi/knowledge.go` in the moat repository.

use crate::json::{self, Object, Value};
use crate::{code, transport, Error, Result};

fn flat(what: &str, members: &[(&str, Value)]) -> Result<String> {
    Value::object(members.iter().map(|(k, v)| (*k, v.clone())))
        .to_json()
        .map_err(|e| Error::new(e.code(), format!("{}: {}", what, e.message())))
}

/// Stores `text` under `id` in `collection`, replacing the document of
/// that id there, and reports whether it replaced one. `meta` may be
/// empty.
pub fn add(collection: &str, id: &str, text: &str, meta: &[(&str, Value)]) -> Result<bool> {
    let mut req = vec![("collection", json::string(collection)), ("id", json::string(id)), ("text", json::string(text))];
    if !meta.is_empty() {
        req.push(("meta", flat("knowledge.add: meta", meta)?));
    }
    transport::round_trip("knowledge.add", json::object(&req).as_bytes(), |body| Object::parse(body, "knowledge.add")?.get_bool("replaced"))
}

/// Removes the document `id` from `collection` and reports whether it
/// existed.
pub fn delete(collection: &str, id: &str) -> Result<bool> {
    let req = json::object(&[("collection", json::string(collection)), ("id", json::string(id))]);
    transport::round_trip("knowledge.delete", req.as_bytes(), |body| Object::parse(body, "knowledge.delete")?.get_bool("deleted"))
}

/// A search's options: at most `limit` hits (0: 10; at most 50), and only
/// documents whose meta holds every member of `filter` with an equal
/// value (`"1"` does not equal `1`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Search {
    /// The most hits.
    pub limit: u32,
    /// Metadata every hit must hold.
    pub filter: Vec<(String, Value)>,
}

impl Search {
    /// Up to 10 hits, unfiltered.
    pub fn new() -> Search {
        Search::default()
    }
    /// Sets the most hits.
    pub fn limit(mut self, n: u32) -> Search {
        self.limit = n;
        self
    }
    /// Keeps only documents whose meta holds `key` equal to `value`.
    pub fn filter(mut self, key: &str, value: impl Into<Value>) -> Search {
        self.filter.push((key.to_string(), value.into()));
        self
    }
}

/// One document a search found.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// Its id.
    pub id: String,
    /// Higher is better; compare scores of one search only.
    pub score: f64,
    /// The text around the words found, "…" where it was cut.
    pub snippet: String,
    /// Its meta: a JSON object (`{}` when it has none).
    pub meta: String,
}

impl Hit {
    /// The meta's members.
    pub fn meta(&self) -> Result<Object<'_>> {
        Object::parse(self.meta.as_bytes(), "a hit's meta")
    }
}

/// Returns the documents of `collection` holding every word of `query`,
/// best first.
pub fn search(collection: &str, query: &str, opts: &Search) -> Result<Vec<Hit>> {
    let mut req = vec![("collection", json::string(collection)), ("query", json::string(query))];
    if opts.limit > 0 {
        req.push(("limit", opts.limit.to_string()));
    }
    if !opts.filter.is_empty() {
        let filter = Value::Object(opts.filter.clone());
        req.push(("filter", filter.to_json().map_err(|e| Error::new(e.code(), format!("knowledge.search: filter: {}", e.message())))?));
    }
    transport::round_trip("knowledge.search", json::object(&req).as_bytes(), |body| {
        let o = Object::parse(body, "knowledge.search")?;
        let raw = match o.get_raw("hits") {
            None | Some(b"null") => return Ok(Vec::new()),
            Some(raw) => raw,
        };
        json::elements(raw, "knowledge.search")?
            .into_iter()
            .map(|h| {
                let o = Object::parse(h, "knowledge.search")?;
                let bad = || Error::new(code::INTERNAL, "knowledge.search: a hit of the reply lacks its id or score");
                Ok(Hit {
                    id: o.get_string("id")?.ok_or_else(bad)?,
                    score: o.get_f64("score")?.ok_or_else(bad)?,
                    snippet: o.get_string("snippet")?.unwrap_or_default(),
                    meta: o.get_object("meta")?.unwrap_or_else(|| "{}".to_string()),
                })
            })
            .collect()
    })
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
        fake::set(Some(Box::new(move |op, req| {
            s.borrow_mut().push(String::from_utf8(req.to_vec()).unwrap());
            match op {
                "knowledge.add" => (0, br#"{"replaced":false}"#.to_vec()),
                _ => (0, r#"{"hits":[{"id":"k1","score":1.25,"snippet":"\u2026the text","meta":{"lang":"en"}},{"id":"k2","score":0.5,"snippet":"s","meta":{}}]}"#.as_bytes().to_vec()),
            }
        })));
        assert!(!add("docs", "k1", "the \"text\"", &[("lang", "en".into())]).unwrap());
        assert_eq!(seen.borrow()[0], r#"{"collection":"docs","id":"k1","text":"the \"text\"","meta":{"lang":"en"}}"#);
        let hits = search("docs", "text", &Search::new().limit(5).filter("lang", "en")).unwrap();
        assert_eq!(seen.borrow()[1], r#"{"collection":"docs","query":"text","limit":5,"filter":{"lang":"en"}}"#);
        assert_eq!(hits.len(), 2);
        assert_eq!((hits[0].id.as_str(), hits[0].score, hits[0].snippet.as_str()), ("k1", 1.25, "…the text"));
        assert_eq!(hits[0].meta().unwrap().get_string("lang").unwrap().as_deref(), Some("en"));
        assert_eq!(hits[1].meta, "{}");
        assert!(add("docs", "k", "t", &[("n", f64::NAN.into())]).unwrap_err().is(code::INVALID_ARGUMENT));
        assert_eq!(seen.borrow().len(), 2);
        fake::set(Some(Box::new(|_, _| (0, br#"{"hits":[{"id":"k1"}]}"#.to_vec()))));
        assert!(search("docs", "t", &Search::new()).unwrap_err().is(code::INTERNAL), "a hit without its score");
        fake::set(None);
    }
}
